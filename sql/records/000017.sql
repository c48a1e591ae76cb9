-- What each Formica worker runs, on its lease row, so that `formica why` can tell a job no
-- live worker takes (driver/src/inspect/why.rs): its task identifiers, the flags it accepts
-- (empty: any job) and the flags it refuses (null: a function decides before each fetch, so
-- they are not known here). Written beside the heartbeat, only when they differ
-- (sql/queries/worker/record_runs.sql), never per job. Null in the rows of workers older
-- than this step until they next renew.
alter table :RECORDS.leases
  add column tasks text[],
  add column accepted_flags text[],
  add column forbidden_flags text[];

