-- Make task $1 fair over partition $2 ('field' or 'key_prefix') with argument $3, tenants
-- weighing $4 (a JSON object of tenant to weight; others weigh 1), set by $5 (null: the
-- database role); replaces the task's fairness. Wakes the workers on 'formica:flow'. Row:
-- when it was set.
with made as (
  insert into :RECORDS.fair_shares (task, partition_kind, partition_arg, weights, set_by)
  values ($1::text, $2::text, $3::text, $4::text::jsonb, coalesce($5::text, current_user::text))
  on conflict (task) do update set partition_kind = excluded.partition_kind,
    partition_arg = excluded.partition_arg, weights = excluded.weights,
    set_by = excluded.set_by, set_at = now()
  returning fair_shares.set_at
)
select made.set_at from made cross join lateral (select pg_notify('formica:flow', '')) as woken
