-- add_jobs: insert many jobs in one statement; a spec whose job_key an existing job holds
-- updates that job instead (see the job-key rules in the README and core::job_key).
create or replace function :SCHEMA.add_jobs(
  specs :SCHEMA.job_spec[],
  job_key_preserve_run_at boolean default false
) returns setof :SCHEMA._private_jobs
language plpgsql
as $$
begin
  if coalesce(array_length(specs, 1), 0) = 0 then
    return;
  end if;

  -- Register identifiers and queue names only when missing: an insert that hits the
  -- conflict would still consume an identity value.
  insert into :SCHEMA._private_tasks (identifier)
    select distinct spec.identifier
    from unnest(specs) as spec
    where not exists (
      select 1 from :SCHEMA._private_tasks as tasks where tasks.identifier = spec.identifier)
    on conflict do nothing;

  insert into :SCHEMA._private_job_queues (queue_name)
    select distinct spec.queue_name
    from unnest(specs) as spec
    where spec.queue_name is not null
      and not exists (
        select 1 from :SCHEMA._private_job_queues as job_queues
        where job_queues.queue_name = spec.queue_name)
    on conflict do nothing;

  -- A key held by a job that is running or out of attempts cannot be updated in place:
  -- that job gives up the key and will not be retried, and a new job takes the key.
  update :SCHEMA._private_jobs as jobs
    set key = null, attempts = jobs.max_attempts, updated_at = now()
    from unnest(specs) as spec
    where spec.job_key is not null
      and jobs.key = spec.job_key
      and jobs.is_available is not true;

  -- `r` keeps PostgreSQL from folding identical notifications within one transaction.
  perform pg_notify(
    'jobs:insert',
    '{"r":' || random()::text || ',"count":' || array_length(specs, 1)::text || '}');

  return query
    insert into :SCHEMA._private_jobs as jobs (
      job_queue_id, task_id, payload, run_at, max_attempts, key, priority, flags)
    select
      job_queues.id,
      tasks.id,
      coalesce(spec.payload, '{}'::json),
      coalesce(spec.run_at, now()),
      coalesce(spec.max_attempts, 25),
      spec.job_key,
      coalesce(spec.priority, 0),
      (select jsonb_object_agg(flag, true) from unnest(spec.flags) as flag)
    from unnest(specs) as spec
    inner join :SCHEMA._private_tasks as tasks on tasks.identifier = spec.identifier
    left join :SCHEMA._private_job_queues as job_queues on job_queues.queue_name = spec.queue_name
    on conflict (key) do update set
      job_queue_id = excluded.job_queue_id,
      task_id = excluded.task_id,
      -- Batch jobs accumulate: two array payloads are concatenated, oldest first.
      payload = case
        when json_typeof(jobs.payload) = 'array' and json_typeof(excluded.payload) = 'array'
          then (jobs.payload::jsonb || excluded.payload::jsonb)::json
        else excluded.payload
      end,
      max_attempts = excluded.max_attempts,
      run_at = case
        when job_key_preserve_run_at is true and jobs.attempts = 0 then jobs.run_at
        else excluded.run_at
      end,
      priority = excluded.priority,
      revision = jobs.revision + 1,
      flags = excluded.flags,
      attempts = 0,
      last_error = null,
      updated_at = now()
    where jobs.locked_at is null
    returning *;
end;
$$;
