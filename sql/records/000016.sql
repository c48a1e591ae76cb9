-- Durable jobs (docs/guide/durable-jobs.md): the steps a job finished, one row per job and
-- step name, with what the step returned (JSON). A retry of the job reads its finished
-- steps here instead of running them again. The rows go when the job completes in its
-- transaction (`sql/queries/durable/steps_*.sql`); with history on, into the job's history row
-- (`job_history.steps`), so they are kept, and pruned, with it. No foreign key to the jobs
-- table: graphile-worker's schema stays exactly its own, and its deletes pay nothing for it.
create table :RECORDS.job_steps (
  job_id bigint not null,
  name text not null,
  output json not null,
  finished_at timestamptz not null default now(),
  primary key (job_id, name)
);

-- The steps a completed job had finished (name to output), when it completed in its
-- transaction with history on; null otherwise.
alter table :RECORDS.job_history add column steps json;
