-- Rate limit task $1 to $2 jobs locked per $3 milliseconds, per partition ($4 'field' or
-- 'key_prefix' with its argument $5; nulls: the whole task), set by $6 (null: the database
-- role); replaces the task's limit. Wakes the workers on 'formica:flow'. Row: when it was set.
with limited as (
  insert into :RECORDS.rate_limits (task, max_starts, period_ms, partition_kind, partition_arg, set_by)
  values ($1::text, $2::int, $3::int, $4::text, $5::text, coalesce($6::text, current_user::text))
  on conflict (task) do update set max_starts = excluded.max_starts, period_ms = excluded.period_ms,
    partition_kind = excluded.partition_kind, partition_arg = excluded.partition_arg,
    set_by = excluded.set_by, set_at = now()
  returning rate_limits.set_at
)
select limited.set_at from limited cross join lateral (select pg_notify('formica:flow', '')) as woken
