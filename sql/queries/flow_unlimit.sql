-- Lift the rate limit of task $1 (and forget its logged starts); wakes the workers on
-- 'formica:flow' if there was one. Rows: one if there was.
with lifted as (
  delete from :RECORDS.rate_limits as rate_limits where rate_limits.task = $1::text
  returning rate_limits.task
),
forgotten as (
  delete from :RECORDS.rate_starts as starts where starts.task in (select lifted.task from lifted)
)
select lifted.task from lifted cross join lateral (select pg_notify('formica:flow', '')) as woken
