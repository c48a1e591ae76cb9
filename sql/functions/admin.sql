-- The admin functions. Each leaves alone any job a live worker holds: a lock younger than
-- four hours is taken to belong to a running task.

create or replace function :SCHEMA.complete_jobs(job_ids bigint[])
returns setof :SCHEMA._private_jobs
language sql
as $$
  delete from :SCHEMA._private_jobs as jobs
  where jobs.id = any(job_ids)
    and (jobs.locked_at is null or jobs.locked_at < now() - interval '4 hours')
  returning *;
$$;

create or replace function :SCHEMA.permanently_fail_jobs(job_ids bigint[], error_message text default null)
returns setof :SCHEMA._private_jobs
language sql
as $$
  update :SCHEMA._private_jobs as jobs
  set last_error = coalesce(error_message, 'Manually marked as failed'),
    attempts = jobs.max_attempts,
    updated_at = now()
  where jobs.id = any(job_ids)
    and (jobs.locked_at is null or jobs.locked_at < now() - interval '4 hours')
  returning *;
$$;

create or replace function :SCHEMA.reschedule_jobs(
  job_ids bigint[],
  run_at timestamptz default null,
  priority integer default null,
  attempts integer default null,
  max_attempts integer default null
) returns setof :SCHEMA._private_jobs
language sql
as $$
  update :SCHEMA._private_jobs as jobs
  set run_at = coalesce(reschedule_jobs.run_at, jobs.run_at),
    priority = coalesce(reschedule_jobs.priority::smallint, jobs.priority),
    attempts = coalesce(reschedule_jobs.attempts::smallint, jobs.attempts),
    max_attempts = coalesce(reschedule_jobs.max_attempts::smallint, jobs.max_attempts),
    updated_at = now()
  where jobs.id = any(job_ids)
    and (jobs.locked_at is null or jobs.locked_at < now() - interval '4 hours')
  returning *;
$$;

-- Releases every job and queue held by the given workers (or pools), whatever the lock's
-- age: for a worker known to be dead. Attempts and run_at are left as they are.
create or replace function :SCHEMA.force_unlock_workers(worker_ids text[])
returns void
language sql
as $$
  update :SCHEMA._private_jobs as jobs
  set locked_at = null, locked_by = null
  where jobs.locked_by = any(worker_ids);
  update :SCHEMA._private_job_queues as job_queues
  set locked_at = null, locked_by = null
  where job_queues.locked_by = any(worker_ids);
$$;
