-- The W3C trace context (https://www.w3.org/TR/trace-context/) a job was added in, so its
-- run joins the trace of whatever added it (driver/src/traces.rs, cargo feature `traces`).
-- Kept here rather than in the payload or a new column of the jobs table: graphile-worker's
-- schema stays its own and its workers read exactly the payload they were given. Written by
-- the add's own statement (sql/queries/add_traced.sql) only when the add ran inside a span;
-- read with the fetch (`GET_JOBS` traced); deleted with the job by a Formica worker's
-- completion (sql/queries/worker/complete_jobs.sql), and, for jobs deleted any other way,
-- by the recovery sweep once no older job remains (sql/queries/worker/recover_lapsed.sql).
-- No foreign key to the jobs table, as for cancel_requests: it would add a lookup to every
-- job deleted by anyone.
create table :RECORDS.job_traces (
  job_id bigint primary key,
  traceparent text not null,
  tracestate text
);
