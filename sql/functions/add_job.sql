-- add_job: one job; `replace` and `preserve_run_at` go through add_jobs, `unsafe_dedupe`
-- never touches an existing job that holds the key (it only bumps its revision).
create or replace function :SCHEMA.add_job(
  identifier text,
  payload json default null,
  queue_name text default null,
  run_at timestamptz default null,
  max_attempts integer default null,
  job_key text default null,
  priority integer default null,
  flags text[] default null,
  job_key_mode text default 'replace'
) returns :SCHEMA._private_jobs
language plpgsql
as $$
#variable_conflict use_column
declare
  v_job :SCHEMA._private_jobs;
begin
  if add_job.job_key is not null and add_job.job_key_mode = 'unsafe_dedupe' then
    insert into :SCHEMA._private_tasks (identifier)
      select add_job.identifier
      where not exists (
        select 1 from :SCHEMA._private_tasks as tasks where tasks.identifier = add_job.identifier)
      on conflict do nothing;
    if add_job.queue_name is not null then
      insert into :SCHEMA._private_job_queues (queue_name)
        select add_job.queue_name
        where not exists (
          select 1 from :SCHEMA._private_job_queues as job_queues
          where job_queues.queue_name = add_job.queue_name)
        on conflict do nothing;
    end if;

    insert into :SCHEMA._private_jobs as jobs (
      job_queue_id, task_id, payload, run_at, max_attempts, key, priority, flags)
    values (
      (select job_queues.id from :SCHEMA._private_job_queues as job_queues
        where job_queues.queue_name = add_job.queue_name),
      (select tasks.id from :SCHEMA._private_tasks as tasks
        where tasks.identifier = add_job.identifier),
      coalesce(add_job.payload, '{}'::json),
      coalesce(add_job.run_at, now()),
      coalesce(add_job.max_attempts::smallint, 25),
      add_job.job_key,
      coalesce(add_job.priority::smallint, 0),
      (select jsonb_object_agg(flag, true) from unnest(add_job.flags) as flag))
    on conflict (key) do update set
      revision = jobs.revision + 1,
      updated_at = now()
    returning * into v_job;

    -- Only a real insert is news to the workers.
    if v_job.revision = 0 then
      perform pg_notify('jobs:insert', '{"r":' || random()::text || ',"count":1}');
    end if;
    return v_job;
  elsif add_job.job_key is not null
    and add_job.job_key_mode is not null
    and add_job.job_key_mode not in ('replace', 'preserve_run_at') then
    raise exception 'Invalid job_key_mode value, expected ''replace'', ''preserve_run_at'' or ''unsafe_dedupe''.'
      using errcode = 'GWBKM';
  end if;

  select * into v_job
  from :SCHEMA.add_jobs(
    array[row(
      add_job.identifier,
      add_job.payload,
      add_job.queue_name,
      add_job.run_at,
      add_job.max_attempts::smallint,
      add_job.job_key,
      add_job.priority::smallint,
      add_job.flags
    ):::SCHEMA.job_spec],
    add_job.job_key_mode = 'preserve_run_at');
  return v_job;
end;
$$;
