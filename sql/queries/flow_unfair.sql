-- Lift the fairness of task $1 (its partition in $2 and $3 is not asked: a task has one),
-- and forget its tenants' passes and its clock; wakes the workers on 'formica:flow' if there
-- was one. Rows: one if there was.
with lifted as (
  delete from :RECORDS.fair_shares as shares where shares.task = $1::text returning shares.task
),
forgotten_passes as (
  delete from :RECORDS.fair_passes as passes using lifted where passes.task = lifted.task
),
forgotten_clock as (
  delete from :RECORDS.fair_clocks as clocks using lifted where clocks.task = lifted.task
)
select lifted.task from lifted cross join lateral (select pg_notify('formica:flow', '')) as woken
