-- Lift the cap of task $1 over partition ($2 kind, $3 argument; nulls: the whole task's);
-- wakes the workers on 'formica:flow' if there was one. Rows: one if there was.
with lifted as (
  delete from :RECORDS.caps as caps
  where caps.task = $1::text and caps.partition_kind is not distinct from $2::text
    and caps.partition_arg is not distinct from $3::text
  returning caps.task
)
select lifted.task from lifted cross join lateral (select pg_notify('formica:flow', '')) as woken
