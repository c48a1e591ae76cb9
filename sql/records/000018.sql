-- What a running job reports beside its outcome: its progress (docs/guide/progress.md) and
-- its logs (docs/guide/job-logs.md), each written by its worker coalesced, in one statement
-- at most a few times a second whatever the handlers call (sql/queries/reports/). Kept
-- after the job ends, so a waiter or the history page still reads them; the history's
-- pruner removes rows older than its longest retention (`prune_job_reports`).

-- Progress: one row a job.
create table :RECORDS.job_progress (
  job_id bigint primary key,
  -- How far, from 0 to 1, if the handler said.
  fraction double precision check (fraction between 0 and 1),
  -- What else the handler said (a small JSON value).
  value jsonb,
  updated_at timestamptz not null default now()
);
create index job_progress_updated_at on :RECORDS.job_progress using brin (updated_at);

-- Logs: the lines of each attempt, bounded by the worker (`JobLogs`). Read by job, pruned
-- by age: lines come in `at` order, so a BRIN index is enough for the pruner.
create table :RECORDS.job_logs (
  job_id bigint not null,
  attempt smallint not null,
  -- Its place in its attempt's log, from 0.
  line integer not null,
  at timestamptz not null,
  level text not null,
  message text not null
);
create index job_logs_job_id on :RECORDS.job_logs (job_id);
create index job_logs_at on :RECORDS.job_logs using brin (at);

-- Called by the history's pruner (sql/src/history.rs, PRUNE) once `prune_history` ran: the
-- reports older than every retention as of `as_of` go (a null retention keeps them for ever), at
-- most `batch` rows. Returns the rows deleted.
create function :RECORDS.prune_job_reports(
  as_of timestamptz, completed interval, failed interval, cancelled interval, batch integer
) returns bigint language plpgsql as $$
declare
  n bigint;
  m bigint;
begin
  if completed is null or failed is null or cancelled is null then
    return 0;
  end if;
  delete from :RECORDS.job_progress where job_id = any(array(
    select job_id from :RECORDS.job_progress
    where updated_at < as_of - greatest(completed, failed, cancelled) limit batch));
  get diagnostics n = row_count;
  delete from :RECORDS.job_logs where ctid = any(array(
    select ctid from :RECORDS.job_logs
    where at < as_of - greatest(completed, failed, cancelled) limit batch));
  get diagnostics m = row_count;
  return n + m;
end
$$;
