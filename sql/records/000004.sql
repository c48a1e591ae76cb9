-- The crontab each worker runs, in canonical form (one item a line), so that the dashboard
-- shows the crontab of the live workers without being given it again. Kept on the lease
-- row, so it goes with the worker: written beside each heartbeat (sql/queries/worker/
-- record_crontab.sql), read by sql/queries/inspect/live_crontabs.sql. Null: the worker
-- runs no crontab, or is older than this migration.
alter table :RECORDS.leases add column crontab text;
