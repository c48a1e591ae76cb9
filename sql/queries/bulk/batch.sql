-- One batch of a bulk action, in a transaction of its own: the jobs the filter picks are
-- locked, skipping any another transaction has locked (a worker taking it now), and the
-- action changes them through graphile-worker's own admin functions. Rows: how many it
-- changed, and the last id of the batch (null: no job left), where the next batch starts.
with batch as (
  /*:MATCHING*/
  for update of jobs skip locked
),
changed as (
  /*:CHANGE*/
)
select (select count(*) from changed) as changed, (select max(batch.id) from batch) as last
