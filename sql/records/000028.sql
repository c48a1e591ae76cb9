-- The settling's calls of the signal, timer and sub-workflow functions made only when a job
-- at hand has a wait or a sub-workflow (docs/guide/workflows.md, "Cost"). Each is a function
-- with settings of its own, and its call cost more than its work: with one completion a
-- statement, about a fifth of what settling a chain's job added to it, for workflows with
-- neither. The probes that decide are the ones those functions opened with, by the same keys.
-- And two reads of the index of released jobs where a key was at hand: the resolver's
-- settling, and the jobs add_workflow returns.

-- release_workflow_jobs (records step 24's), with the two calls guarded (marked "Records
-- step 28").
create or replace function :RECORDS.release_workflow_jobs(ids bigint[], settling integer[] default null)
returns void language plpgsql
set search_path = pg_catalog, pg_temp set plan_cache_mode = force_generic_plan set enable_seqscan = off as $$
#variable_conflict use_column
declare
  -- The sequence graphile_worker's identity column draws from.
  job_ids regclass := pg_get_serial_sequence(':SCHEMA._private_jobs', 'id');
  released integer;
  ready bigint[];
begin
  if coalesce(cardinality(ids), 0) = 0 then
    return;
  end if;
  -- Records step 23: those still waiting for a signal stay (counting down what settles now,
  -- as a dependent still waiting does); timers and signals applied to the others.
  -- Records step 28: only if one of them waits for a signal or a timer.
  if exists (select from :RECORDS.workflow_waits as waits where waits.job = any(ids)) then
    ready := :RECORDS.workflow_jobs_ready(ids);
  else
    ready := ids;
  end if;
  if cardinality(ready) < cardinality(ids) then
    update :RECORDS.workflow_jobs as jobs
    set pending = jobs.pending - held.settling
    from unnest(ids, settling) as held (id, settling)
    where jobs.id = held.id and held.id <> all(ready) and held.settling is not null;
    -- `settling` stays parallel to `ids`.
    select coalesce(array_agg(kept.id order by kept.n), '{}'), array_agg(kept.settling order by kept.n)
    into ids, settling
    from unnest(ids, settling) with ordinality as kept (id, settling, n)
    where kept.id = any(ready);
    if cardinality(ids) = 0 then
      return;
    end if;
  end if;
  -- Records step 24: the sub-workflow jobs start their workflows, released without a
  -- graphile_worker job (neither their task registered nor a row inserted below: those take
  -- the jobs still waiting only).
  -- Records step 28: only if one of them is a sub-workflow job.
  if exists (select from :RECORDS.workflow_jobs as jobs where jobs.id = any(ids) and jobs.workflow is not null) then
    perform :RECORDS.start_subworkflows(ids, settling);
  end if;
  -- A statement of its own, so the insert below sees them (as add_jobs registers them).
  with tasks_added as (
    insert into :SCHEMA._private_tasks (identifier)
    select distinct jobs.task_identifier from :RECORDS.workflow_jobs as jobs
    where jobs.id = any(ids) and jobs.state = 'waiting' and not exists (
      select from :SCHEMA._private_tasks as tasks where tasks.identifier = jobs.task_identifier)
    on conflict do nothing
  )
  insert into :SCHEMA._private_job_queues (queue_name)
  select distinct jobs.queue_name from :RECORDS.workflow_jobs as jobs
  where jobs.id = any(ids) and jobs.state = 'waiting' and jobs.queue_name is not null and not exists (
    select from :SCHEMA._private_job_queues as job_queues where job_queues.queue_name = jobs.queue_name)
  on conflict do nothing;
  with chosen as materialized (
    -- The ids are drawn in the order of the workflow jobs (graphile_worker fetches equals
    -- by id).
    select ordered.*, nextval(job_ids) as job_id
    from (
      select jobs.id, jobs.task_identifier, jobs.queue_name, jobs.run_at, jobs.max_attempts,
        jobs.priority, jobs.flags, coalesce(wanted.settling, 0) as settling,
        case when jobs.callback is null then jobs.payload
          else (jobs.payload::jsonb || jsonb_build_object('batch', :RECORDS.workflow_batch(jobs.id)))::json
        end as payload
      from unnest(ids, settling) as wanted (id, settling)
      join :RECORDS.workflow_jobs as jobs on jobs.id = wanted.id
      join :RECORDS.workflows as workflows on workflows.id = jobs.workflow_id
      where jobs.state = 'waiting' and workflows.cancelled_at is null
      order by jobs.id
    ) as ordered
  ),
  added as (
    insert into :SCHEMA._private_jobs
      (id, job_queue_id, task_id, payload, run_at, max_attempts, priority, flags)
    overriding system value
    select chosen.job_id,
      (select job_queues.id from :SCHEMA._private_job_queues as job_queues
       where job_queues.queue_name = chosen.queue_name),
      -- A task not registered fails the insert (not null), never drops the job.
      (select tasks.id from :SCHEMA._private_tasks as tasks where tasks.identifier = chosen.task_identifier),
      chosen.payload, coalesce(chosen.run_at, now()), coalesce(chosen.max_attempts, 25),
      coalesce(chosen.priority, 0),
      case when chosen.flags is null then '{"formica:workflow": true}'::jsonb
        else (select jsonb_object_agg(flag, true) from unnest(chosen.flags || '{formica:workflow}'::text[]) as flag)
      end
    from chosen
    order by chosen.job_id
  ),
  marked as (
    update :RECORDS.workflow_jobs as jobs
    -- The clock, not the transaction's start: the resolver's statements see what committed
    -- after its transaction began, and a release is never dated before what caused it.
    set state = 'released', released_at = clock_timestamp(), job_id = chosen.job_id,
      pending = jobs.pending - chosen.settling
    from chosen
    where jobs.id = chosen.id
    returning jobs.id
  )
  select count(*) into released from marked;
  if released > 0 then
    -- add_jobs's notification (`r` keeps PostgreSQL from folding identical ones).
    perform pg_notify('jobs:insert', '{"r":' || random()::text || ',"count":' || released::text || '}');
  end if;
end
$$;

-- The settling trigger's function (records step 24's), with the call of finish_subworkflows
-- guarded (marked "Records step 28").
create or replace function :RECORDS.workflow_jobs_settled() returns trigger language plpgsql
set search_path = pg_catalog, pg_temp set plan_cache_mode = force_generic_plan as $$
#variable_conflict use_column
declare
  ids bigint[];
  outcomes text[];
  workflows bigint[];
begin
  if not exists (select from settled_before as before where before.state = 'released') then
    return null;
  end if;
  -- Each new row looked up by id in one object of the old rows' states (a binary search).
  select array_agg(after.id order by after.id), array_agg(after.state order by after.id),
    array_agg(distinct after.workflow_id)
  from settled_after as after,
    (select jsonb_object_agg(before.id::text, before.state) as states from settled_before as before) as old
  where old.states ->> after.id::text = 'released' and after.state in ('completed', 'failed', 'cancelled')
  into ids, outcomes, workflows;
  if ids is not null then
    perform :RECORDS.settle_workflow_jobs(ids, outcomes);
    -- Records step 24: the sub-workflows that ended with them settle their jobs.
    -- Records step 28: only if one of those workflows is a sub-workflow (by the index of
    -- those; finish_subworkflows takes the ones whose job still waits).
    if exists (select from :RECORDS.workflow_jobs as parents where parents.subworkflow_id = any(workflows)) then
      perform :RECORDS.finish_subworkflows(workflows);
    end if;
  end if;
  return null;
end
$$;

-- resolve_workflows (records step 24's), settling what it found by the primary key. Its
-- update joined the found jobs to the index of released jobs, read whole from its start
-- even when nothing was found: a second walk over the entries of every job settled since the
-- last vacuum (2.9 s to its first row, wall time on a busy 2-core machine, in
-- `WORKFLOW=chain:5 bench/drain-cpu 100000` under `auto_explain`). The jobs found are still
-- read by that index, once.
create or replace function :RECORDS.resolve_workflows() returns bigint language plpgsql
set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
  ids bigint[];
  outcomes text[];
  errors text[];
  settled bigint;
begin
  if not pg_try_advisory_xact_lock(hashtext('formica resolve_workflows :RECORDS')) then
    return null;
  end if;
  select coalesce(array_agg(found.id order by found.id), '{}'), array_agg(found.outcome order by found.id),
    array_agg(found.last_error order by found.id)
  into ids, outcomes, errors
  from (
    select jobs.id,
      case
        when live.id is not null then
          case when live.last_error like 'cancelled: %' then 'cancelled' else 'failed' end
        else coalesce(recorded.outcome, 'completed')
      end as outcome,
      coalesce(live.last_error, recorded.last_error) as last_error
    from :RECORDS.workflow_jobs as jobs
    left join :SCHEMA._private_jobs as live on live.id = jobs.job_id
    left join lateral (
      select history.outcome, history.last_error from :RECORDS.job_history as history
      -- Since its release: a job run again by retry_workflow keeps its id.
      where history.job_id = jobs.job_id and live.id is null and history.finished_at >= jobs.released_at
      order by history.finished_at desc limit 1
    ) as recorded on true
    where jobs.state = 'released' and jobs.job_id is not null
      and (live.id is null or (live.attempts >= live.max_attempts and live.locked_at is null))
  ) as found;
  if cardinality(ids) = 0 then
    return 0;
  end if;
  -- In id order (the order settlers lock in), each by the primary key.
  update :RECORDS.workflow_jobs as jobs
  set state = found.outcome, finished_at = now(),
    last_error = case when found.outcome = 'completed' then null else found.last_error end
  from unnest(ids, outcomes, errors) as found (id, outcome, last_error)
  where jobs.id = found.id and jobs.state = 'released';
  get diagnostics settled = row_count;
  return settled;
end
$$;

-- add_workflow (records step 24's), reading its own released jobs by the workflow's key
-- (marked "Records step 28"). It looked them up by their state: a plan that went by the
-- index of released jobs read every workflow's, so each add cost as much as the jobs
-- released anywhere (1.8 ms for 15,000 of them), and adding n workflows in one statement n^2.
create or replace function :RECORDS.add_workflow(workflow_name text, spec json)
returns table (workflow_id bigint, name text, job_id bigint) language plpgsql
set search_path = pg_catalog, pg_temp set enable_seqscan = off as $$
#variable_conflict use_column
declare
  added bigint;
begin
  insert into :RECORDS.workflows (name) values (workflow_name) returning id into added;
  insert into :RECORDS.workflow_jobs (workflow_id, name, task_identifier, payload, queue_name,
    run_at, max_attempts, priority, flags, on_dependency_failure, callback, workflow, state, pending)
  select added, job.name, job.task_identifier, job.payload, job.queue_name, job.run_at,
    job.max_attempts, job.priority, job.flags, coalesce(job.on_dependency_failure, 'cancel'),
    job.callback, job.workflow, 'waiting',
    (select count(distinct dependency) from json_array_elements_text(job.depends_on) as dependency)
  from json_array_elements(spec) with ordinality as element (value, n)
  cross join lateral json_to_record(element.value) as job (name text, task_identifier text,
    payload json, queue_name text, run_at timestamptz, max_attempts smallint, priority smallint,
    flags text[], on_dependency_failure text, callback text, workflow json, depends_on json)
  order by element.n;
  insert into :RECORDS.workflow_dependencies (job, depends_on)
  select distinct jobs.id, dependencies.id
  from json_array_elements(spec) as element (value)
  cross join lateral json_array_elements_text(element.value -> 'depends_on') as dependency (name)
  join :RECORDS.workflow_jobs as jobs
    on jobs.workflow_id = added and jobs.name = element.value ->> 'name'
  join :RECORDS.workflow_jobs as dependencies
    on dependencies.workflow_id = added and dependencies.name = dependency.name;
  -- Records step 23: the signals and timers its jobs wait for.
  perform :RECORDS.add_workflow_waits(added, spec);
  perform :RECORDS.release_workflow_jobs(array(
    select jobs.id from :RECORDS.workflow_jobs as jobs
    where jobs.workflow_id = added and jobs.pending = 0 order by jobs.id));
  -- Records step 28: its own jobs, by the workflow's key (materialized: as a plain filter the
  -- state could be looked up in the index of every workflow's released jobs instead).
  return query with own as materialized (
    select jobs.id, jobs.name, jobs.job_id, jobs.state from :RECORDS.workflow_jobs as jobs
    where jobs.workflow_id = added
  )
  select added, own.name, own.job_id from own
  where own.state = 'released' and own.job_id is not null
  order by own.id;
  -- Records step 23: every job may wait for a signal (step 24: or be a sub-workflow); the id
  -- still comes back.
  if not found then
    return query select added, null::text, null::bigint;
  end if;
end
$$;
