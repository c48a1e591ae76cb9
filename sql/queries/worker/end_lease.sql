-- Worker $1 stopped: its lease lapses now, by the database clock. The other workers stop
-- counting it alive at once (their fetches stop taking turns, see fetch_turn.sql),
-- `formica workers` and the dashboard stop showing it live, and force_unlock_workers takes
-- it; the recovery sweep forgets it after its grace, freeing anything it still held, as for
-- a worker that died.
update :RECORDS.leases as leases
set expires_at = least(leases.expires_at, now())
where leases.worker_id = $1::text
