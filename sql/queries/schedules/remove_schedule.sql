-- Remove the runtime schedule $1 and wake the workers that take runtime schedules. Its
-- known_crontabs row stays (graphile-worker's runner keeps rows of items it no longer
-- runs too): added again, the schedule goes on from its last slot. Rows: one if it existed.
with removed as (
  delete from :RECORDS.schedules where identifier = $1::text returning identifier
)
select removed.identifier, pg_notify('formica:schedules', '') is not null as notified from removed
