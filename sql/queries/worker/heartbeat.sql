-- Worker $1 is alive for $2 more milliseconds by the database clock (neither suspected nor
-- stopped); it runs on host $3 as process $4, Formica version $5. started_at stays that of
-- the first heartbeat of the lease. Answers whether another Formica worker is alive (the
-- fetch then takes turns, see fetch_turn.sql). A heartbeat that made the lease (the worker started, or
-- its lease was swept) tells the listening workers on `formica:workers` (payload: the
-- worker), so those that were alone take turns at once rather than at their next heartbeat.
with beat as (
  insert into :RECORDS.leases as leases (worker_id, expires_at, host, pid, version, started_at, heartbeat_at)
  values ($1::text, now() + $2::bigint * interval '1 millisecond', $3::text, $4::integer, $5::text, now(), now())
  on conflict (worker_id) do update set expires_at = excluded.expires_at, suspected_at = null, stopped_at = null,
    host = excluded.host, pid = excluded.pid, version = excluded.version, heartbeat_at = excluded.heartbeat_at
  -- xmax is zero on a row this statement inserted, set on one it updated.
  returning leases.xmax = 0 as made
)
select exists (
    select 1 from :RECORDS.leases as others where others.worker_id <> $1::text and others.expires_at > now()),
  (select pg_notify('formica:workers', $1::text) from beat where beat.made)
