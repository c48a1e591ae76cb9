-- Lift the rate limit of task $1 over partition ($2 kind, $3 argument; nulls: the whole
-- task's), and forget its logged starts; wakes the workers on 'formica:flow' if there was
-- one. Rows: one if there was.
with lifted as (
  delete from :RECORDS.rate_limits as rate_limits
  where rate_limits.task = $1::text and rate_limits.partition_kind is not distinct from $2::text
    and rate_limits.partition_arg is not distinct from $3::text
  returning rate_limits.task, coalesce(rate_limits.partition_kind || ':' || rate_limits.partition_arg, '') as per
),
forgotten as (
  delete from :RECORDS.rate_starts as starts
  using lifted where starts.task = lifted.task and starts.per = lifted.per
)
select lifted.task from lifted cross join lateral (select pg_notify('formica:flow', '')) as woken
