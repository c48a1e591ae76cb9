-- Worker $1 stopped cleanly: its lease lapses now, by the database clock, and says it
-- stopped. The other workers stop counting it alive at once (their fetches stop taking
-- turns, see fetch_turn.sql), `formica status` and the dashboard show it stopped (not
-- lapsed, as a worker that died), and force_unlock_workers takes it; the recovery sweep
-- forgets it after its grace, freeing anything it still held, as for a worker that died.
update :RECORDS.leases as leases
set expires_at = least(leases.expires_at, now()), stopped_at = now()
where leases.worker_id = $1::text
