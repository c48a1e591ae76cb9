-- A worker that stopped cleanly says so on its lease (sql/queries/worker/end_lease.sql), so
-- that `formica status` and the dashboard show it stopped, holding nothing and with nothing
-- to unlock, rather than lapsed as a worker that died. A heartbeat clears it (the same
-- worker id running again). Null: the worker runs, or stopped without saying so (died).
alter table :RECORDS.leases add column stopped_at timestamptz;
