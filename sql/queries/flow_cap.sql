-- Cap task $1 at $2 jobs locked at once, per partition ($3 'field' or 'key_prefix' with its
-- argument $4; nulls: the whole task), set by $5 (null: the database role); replaces the
-- task's cap over the same partition (a task may have one per partition). Wakes the workers
-- on 'formica:flow'. Row: when it was set.
with capped as (
  insert into :RECORDS.caps (task, max_running, partition_kind, partition_arg, set_by)
  values ($1::text, $2::int, $3::text, $4::text, coalesce($5::text, current_user::text))
  on conflict (task, coalesce(partition_kind, ''), coalesce(partition_arg, '')) do update
    set max_running = excluded.max_running, set_by = excluded.set_by, set_at = now()
  returning caps.set_at
)
select capped.set_at from capped cross join lateral (select pg_notify('formica:flow', '')) as woken
