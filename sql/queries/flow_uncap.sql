-- Lift the cap of task $1; wakes the workers on 'formica:flow' if there was one. Rows: one
-- if there was.
with lifted as (
  delete from :RECORDS.caps as caps where caps.task = $1::text returning caps.task
)
select lifted.task from lifted cross join lateral (select pg_notify('formica:flow', '')) as woken
