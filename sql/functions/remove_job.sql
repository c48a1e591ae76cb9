-- remove_job: delete the job holding `job_key` unless a live worker holds it; a running
-- job instead gives up its key and will not be retried.
create or replace function :SCHEMA.remove_job(job_key text) returns :SCHEMA._private_jobs
language plpgsql
strict
as $$
declare
  v_job :SCHEMA._private_jobs;
begin
  delete from :SCHEMA._private_jobs as jobs
    where jobs.key = remove_job.job_key
      and (jobs.locked_at is null or jobs.locked_at < now() - interval '4 hours')
    returning * into v_job;
  if found then
    perform pg_notify('jobs:insert', '{"r":' || random()::text || ',"count":-1}');
    return v_job;
  end if;

  update :SCHEMA._private_jobs as jobs
    set key = null, attempts = jobs.max_attempts, updated_at = now()
    where jobs.key = remove_job.job_key
    returning * into v_job;
  return v_job;
end;
$$;
