-- Release every job and queue the workers $1 hold, unless one of them is alive: it has a
-- lease expiring after now() (a Formica worker renewing it; graphile-worker's workers and
-- workers whose lease was deleted have none) and $2 (even if alive) is false. Deciding and
-- unlocking in one statement leaves no gap for a lease to be taken in between; the lease
-- rows are locked first, so a renewal in flight is waited for and its new expiry counts.
-- Answers whether it unlocked, and the live workers with their lease's expiry, by id.
with leases as (
  select worker_id, expires_at
  from :RECORDS.leases
  where worker_id = any($1::text[])
  for update
), alive as (
  select worker_id, expires_at from leases where expires_at > now()
), unlocked as (
  select :SCHEMA.force_unlock_workers($1::text[])
  where $2::bool or not exists (select from alive)
)
select exists (select from unlocked) as unlocked,
  coalesce((select array_agg(worker_id order by worker_id) from alive), '{}') as alive,
  coalesce((select array_agg(expires_at order by worker_id) from alive), '{}') as alive_until
