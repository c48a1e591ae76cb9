-- Pause scope $1 ('task', 'queue' or 'all') named $2 ('' for 'all') with the reason $3
-- (null: none), by $4 (null: the database role). Pausing again keeps the first pause's
-- time and replaces its reason and author. Wakes the workers on 'formica:flow' (delivered
-- at commit). Row: when the pause began.
with paused as (
  insert into :RECORDS.pauses (scope, name, reason, paused_by)
  values ($1::text, $2::text, $3::text, coalesce($4::text, current_user::text))
  on conflict (scope, name) do update set reason = excluded.reason, paused_by = excluded.paused_by
  returning pauses.paused_at
)
select paused.paused_at from paused cross join lateral (select pg_notify('formica:flow', '')) as woken
