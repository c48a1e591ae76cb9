-- What an operator needs to tell the workers apart and see that they are alive: the host
-- and process each runs in, its Formica version, when its lease began and when it last
-- renewed it (by the database clock). Written by each heartbeat (sql/queries/worker/
-- heartbeat.sql); read by `formica status` and the dashboard (sql/queries/inspect/workers.sql).
-- Null in the rows of workers older than this migration until they next renew.
alter table :RECORDS.leases
  add column host text,
  add column pid integer,
  add column version text,
  add column started_at timestamptz not null default now(),
  add column heartbeat_at timestamptz not null default now();
