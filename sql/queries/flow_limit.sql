-- Rate limit task $1 to $2 jobs locked per $3 milliseconds, per partition ($4 'field' or
-- 'key_prefix' with its argument $5; nulls: the whole task), set by $6 (null: the database
-- role); replaces the task's limit over the same partition (a task may have one per
-- partition). Wakes the workers on 'formica:flow'. Row: when it was set.
with limited as (
  insert into :RECORDS.rate_limits (task, max_starts, period_ms, partition_kind, partition_arg, set_by)
  values ($1::text, $2::int, $3::int, $4::text, $5::text, coalesce($6::text, current_user::text))
  on conflict (task, coalesce(partition_kind, ''), coalesce(partition_arg, '')) do update
    set max_starts = excluded.max_starts, period_ms = excluded.period_ms,
    set_by = excluded.set_by, set_at = now()
  returning rate_limits.set_at
)
select limited.set_at from limited cross join lateral (select pg_notify('formica:flow', '')) as woken
