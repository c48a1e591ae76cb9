-- Cancel requests for jobs a worker held when they were cancelled (sql/queries/cancel_jobs.sql):
-- the holder reads its own with each heartbeat (sql/queries/worker/read_cancels.sql) and
-- aborts the task; the recovery sweep (sql/queries/worker/recover_lapsed.sql) cancels the
-- jobs released with a request pending and forgets the requests whose job is gone or done.
-- The first reason stays. No foreign key to the jobs table: it would put a lookup on every
-- completion, and the sweep forgets a request whose job is gone.
create table :RECORDS.cancel_requests (
  job_id bigint primary key,
  reason text not null,
  requested_at timestamptz not null default now()
);
