-- Lift the pause of scope $1 named $2; wakes the workers on 'formica:flow' if there was
-- one. Rows: one if there was.
with lifted as (
  delete from :RECORDS.pauses as pauses
  where pauses.scope = $1::text and pauses.name = $2::text
  returning pauses.scope
)
select lifted.scope from lifted cross join lateral (select pg_notify('formica:flow', '')) as woken
