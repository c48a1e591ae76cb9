-- The settling's update of a workflow job in place (docs/performance.md, "What a workflow's
-- dependency costs"). The index of released jobs by `job_id` named the state in its
-- predicate, and PostgreSQL 15 makes a new index entry in every index for an update that
-- changes a column an index names, predicate included: each settlement wrote its row's new
-- version with an entry in the primary key and in `(workflow_id, name)`. Now no index
-- names a column the settling changes (state, finished_at, output, last_error), and the
-- table keeps room on its pages, so the settling's update is heap-only.
--
-- The resolver still finds every released job that has a graphile_worker job without
-- reading the others: the settling trigger, which sees every update of the table, keeps
-- their ids in `released_workflow_jobs` (added when a row becomes released with a job,
-- removed when it settles).
drop index :RECORDS.workflow_jobs_released;
create index workflow_jobs_job on :RECORDS.workflow_jobs (job_id) where job_id is not null;
alter table :RECORDS.workflow_jobs set (fillfactor = 70);

-- No foreign key: its check would lock the workflow job's row at each release.
create table :RECORDS.released_workflow_jobs (
  job_id bigint primary key,
  job bigint not null
);
insert into :RECORDS.released_workflow_jobs (job_id, job)
select jobs.job_id, jobs.id from :RECORDS.workflow_jobs as jobs
where jobs.state = 'released' and jobs.job_id is not null;

-- The settling trigger's function (records step 28's), keeping `released_workflow_jobs`
-- (marked "Records step 33").
create or replace function :RECORDS.workflow_jobs_settled() returns trigger language plpgsql
set search_path = pg_catalog, pg_temp set plan_cache_mode = force_generic_plan set jit = off as $$
#variable_conflict use_column
declare
  ids bigint[];
  outcomes text[];
  workflows bigint[];
  jobs_settled bigint[];
begin
  -- Records step 33: the rows released with a job, whatever they were before (a row that
  -- stays released is there already).
  insert into :RECORDS.released_workflow_jobs (job_id, job)
  select after.job_id, after.id from settled_after as after
  where after.state = 'released' and after.job_id is not null
  on conflict (job_id) do nothing;
  if not exists (select from settled_before as before where before.state = 'released') then
    return null;
  end if;
  -- Each new row looked up by id in one object of the old rows' states (a binary search).
  select array_agg(after.id order by after.id), array_agg(after.state order by after.id),
    array_agg(distinct after.workflow_id), array_agg(after.job_id) filter (where after.job_id is not null)
  from settled_after as after,
    (select jsonb_object_agg(before.id::text, before.state) as states from settled_before as before) as old
  where old.states ->> after.id::text = 'released' and after.state in ('completed', 'failed', 'cancelled')
  into ids, outcomes, workflows, jobs_settled;
  if ids is not null then
    -- Records step 33.
    delete from :RECORDS.released_workflow_jobs as released where released.job_id = any(jobs_settled);
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

-- resolve_workflows (records step 28's), finding the released jobs in
-- `released_workflow_jobs` (marked "Records step 33"): it reads each one's graphile_worker
-- job by its key, and the workflow job of the few whose job ended or is out of attempts
-- (the index it read before held every released job's row, so each pass read them all).
-- A row whose workflow job was deleted, or is no longer released with that job, is stale:
-- the pass removes it once its job has ended or is out of attempts.
create or replace function :RECORDS.resolve_workflows() returns bigint language plpgsql
set search_path = pg_catalog, pg_temp set jit = off as $$
#variable_conflict use_column
declare
  ids bigint[];
  outcomes text[];
  errors text[];
  stale bigint[];
  settled bigint;
begin
  if not pg_try_advisory_xact_lock(hashtext('formica resolve_workflows :RECORDS')) then
    return null;
  end if;
  select coalesce(array_agg(found.id order by found.id) filter (where found.id is not null), '{}'),
    array_agg(found.outcome order by found.id) filter (where found.id is not null),
    array_agg(found.last_error order by found.id) filter (where found.id is not null),
    coalesce(array_agg(found.job_id) filter (where found.id is null), '{}')
  into ids, outcomes, errors, stale
  from (
    select ended.job_id, jobs.id,
      case
        when ended.live_id is not null then
          case when ended.live_error like 'cancelled: %' then 'cancelled' else 'failed' end
        else coalesce(recorded.outcome, 'completed')
      end as outcome,
      coalesce(ended.live_error, recorded.last_error) as last_error
    from (
      select released.job_id, released.job, live.id as live_id, live.last_error as live_error
      from :RECORDS.released_workflow_jobs as released
      left join :SCHEMA._private_jobs as live on live.id = released.job_id
      where live.id is null or (live.attempts >= live.max_attempts and live.locked_at is null)
    ) as ended
    left join :RECORDS.workflow_jobs as jobs
      on jobs.id = ended.job and jobs.job_id = ended.job_id and jobs.state = 'released'
    left join lateral (
      select history.outcome, history.last_error from :RECORDS.job_history as history
      -- Since its release: a job run again by retry_workflow keeps its id.
      where history.job_id = ended.job_id and ended.live_id is null and history.finished_at >= jobs.released_at
      order by history.finished_at desc limit 1
    ) as recorded on jobs.id is not null
  ) as found;
  delete from :RECORDS.released_workflow_jobs as released where released.job_id = any(stale);
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

-- Records step 33: the released job's graphile_worker id drawn when the workflow job is
-- added (a default, so every way of adding one draws it), so the release's update changes
-- no indexed column either and is heap-only too. Until released it names no job: the reads
-- show a job id only once `released_at` is set, and a sub-workflow job, which never has one,
-- gives it up when it starts its workflow. The sequence is looked up at each add, as the
-- release does, so the default holds no dependency on graphile_worker's sequence (a constant
-- one would keep graphile-worker's own migrations from dropping it).
alter table :RECORDS.workflow_jobs
  alter column job_id set default nextval(pg_get_serial_sequence(':SCHEMA._private_jobs', 'id'));

-- release_workflow_jobs (records step 28's), taking the id drawn at the add (marked
-- "Records step 33").
create or replace function :RECORDS.release_workflow_jobs(ids bigint[], settling integer[] default null)
returns void language plpgsql
set search_path = pg_catalog, pg_temp set plan_cache_mode = force_generic_plan set enable_seqscan = off set jit = off as $$
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
  -- Records step 33: each job once, however often the caller names it, its counts added
  -- up. A settlement's failure waves can name a job twice (a `first_failure` callback that
  -- two waves reach): each copy was a job added to graphile_worker's table, so the job ran
  -- twice, once under an id no workflow job held.
  select array_agg(wanted.id order by wanted.id), array_agg(wanted.settling order by wanted.id)
  into ids, settling
  from (
    select wanted.id, sum(wanted.settling)::integer as settling
    from unnest(ids, settling) as wanted (id, settling)
    group by wanted.id
  ) as wanted;
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
    -- by id). Records step 33: a job released for the first time takes the id drawn when
    -- it was added, if it has one, so its update below changes no indexed column; one run
    -- again by retry_workflow, or added before step 33, draws a new one.
    select ordered.*,
      case when ordered.drawn_id is not null and ordered.first_release then ordered.drawn_id
        else nextval(job_ids) end as job_id
    from (
      select jobs.id, jobs.job_id as drawn_id, jobs.released_at is null as first_release,
        jobs.task_identifier, jobs.queue_name, jobs.run_at, jobs.max_attempts,
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


-- start_subworkflows (records step 24's), a sub-workflow job giving up the id drawn at its
-- add (marked "Records step 33").
create or replace function :RECORDS.start_subworkflows(ids bigint[], settling integer[] default null)
returns void language plpgsql
set search_path = pg_catalog, pg_temp set plan_cache_mode = force_generic_plan set enable_seqscan = off
set jit = off as $$
#variable_conflict use_column
declare
  job record;
  child bigint;
begin
  for job in
    select jobs.id, jobs.workflow, coalesce(wanted.settling, 0) as settling
    from unnest(ids, settling) as wanted (id, settling)
    join :RECORDS.workflow_jobs as jobs on jobs.id = wanted.id
    join :RECORDS.workflows as workflows on workflows.id = jobs.workflow_id
    where jobs.workflow is not null and jobs.state = 'waiting' and workflows.cancelled_at is null
    order by jobs.id
  loop
    select added.workflow_id into child
    from :RECORDS.add_workflow(job.workflow ->> 'name', job.workflow -> 'jobs') as added limit 1;
    update :RECORDS.workflow_jobs as jobs
    set state = 'released', released_at = clock_timestamp(), subworkflow_id = child,
      pending = jobs.pending - job.settling, job_id = null -- Records step 33.
    where jobs.id = job.id;
  end loop;
end
$$;

-- add_workflow_jobs (records step 24's), returning a job id only for the jobs released
-- (marked "Records step 33").
create or replace function :RECORDS.add_workflow_jobs(adder_job_id bigint, spec json)
returns table (found boolean, workflow_id bigint, name text, job_id bigint, added boolean)
language plpgsql set search_path = pg_catalog, pg_temp set enable_seqscan = off set jit = off as $$
#variable_conflict use_column
declare
  adder record;
  cancelled boolean;
  new_ids bigint[];
  open integer;
begin
  select jobs.id, jobs.workflow_id, jobs.name into adder from :RECORDS.workflow_jobs as jobs
  where jobs.job_id = adder_job_id and jobs.state = 'released'
  for update;
  if adder.id is null then
    return query select false, null::bigint, null::text, null::bigint, null::boolean;
    return;
  end if;
  -- Shared with other adds, exclusive of cancel_workflow's mark: a cancel that comes first
  -- is seen here (the jobs are added cancelled), one that comes after sees the jobs added.
  select workflows.cancelled_at is not null into cancelled from :RECORDS.workflows as workflows
  where workflows.id = adder.workflow_id
  for share;
  with inserted as (
    insert into :RECORDS.workflow_jobs as jobs (workflow_id, name, task_identifier, payload,
      queue_name, run_at, max_attempts, priority, flags, on_dependency_failure, callback,
      workflow, state, pending, finished_at, last_error)
    select adder.workflow_id, adder.name || '/' || job.name, job.task_identifier, job.payload,
      job.queue_name, job.run_at, job.max_attempts, job.priority, job.flags,
      coalesce(job.on_dependency_failure, 'cancel'), job.callback, job.workflow,
      case when cancelled then 'cancelled' else 'waiting' end, 0,
      case when cancelled then now() end,
      case when cancelled then 'cancelled: the workflow was cancelled' end
    from json_array_elements(spec) with ordinality as element (value, n)
    cross join lateral json_to_record(element.value) as job (name text, task_identifier text,
      payload json, queue_name text, run_at timestamptz, max_attempts smallint, priority smallint,
      flags text[], on_dependency_failure text, callback text, workflow json)
    order by element.n
    on conflict (workflow_id, name) do nothing
    returning jobs.id
  )
  select coalesce(array_agg(inserted.id order by inserted.id), '{}') into new_ids from inserted;
  insert into :RECORDS.workflow_dependencies (job, depends_on)
  select distinct jobs.id, dependencies.id
  from json_array_elements(spec) as element (value)
  cross join lateral json_array_elements_text(element.value -> 'depends_on') as dependency (name)
  join :RECORDS.workflow_jobs as jobs on jobs.workflow_id = adder.workflow_id
    and jobs.name = adder.name || '/' || (element.value ->> 'name')
  join :RECORDS.workflow_jobs as dependencies on dependencies.workflow_id = adder.workflow_id
    and dependencies.name = adder.name || '/' || dependency.name
  where jobs.id = any(new_ids);
  -- Records step 23's signals and timers, for the jobs added.
  perform :RECORDS.add_workflow_waits(adder.workflow_id, spec, adder.name || '/');
  update :RECORDS.workflow_jobs as jobs
  set pending = (select count(*) from :RECORDS.workflow_dependencies as dependencies
    join :RECORDS.workflow_jobs as dependency on dependency.id = dependencies.depends_on
    where dependencies.job = jobs.id and dependency.state in ('waiting', 'released'))
  where jobs.id = any(new_ids) and jobs.state = 'waiting';
  -- The adder's dependents wait for every job added (locked in id order, as the settling
  -- trigger locks them).
  perform from :RECORDS.workflow_jobs as jobs
  where jobs.state = 'waiting' and jobs.id = any(array(
    select dependencies.job from :RECORDS.workflow_dependencies as dependencies
    where dependencies.depends_on = adder.id))
  order by jobs.id
  for update;
  insert into :RECORDS.workflow_dependencies (job, depends_on)
  select dependents.job, new.id
  from :RECORDS.workflow_dependencies as dependents cross join unnest(new_ids) as new (id)
  where dependents.depends_on = adder.id;
  select count(*) into open from :RECORDS.workflow_jobs as jobs
  where jobs.id = any(new_ids) and jobs.state = 'waiting';
  update :RECORDS.workflow_jobs as jobs
  set pending = jobs.pending + open
  where jobs.state = 'waiting' and open > 0 and jobs.id = any(array(
    select dependencies.job from :RECORDS.workflow_dependencies as dependencies
    where dependencies.depends_on = adder.id));
  perform :RECORDS.release_workflow_jobs(array(
    select jobs.id from :RECORDS.workflow_jobs as jobs
    where jobs.id = any(new_ids) and jobs.state = 'waiting' and jobs.pending = 0
    order by jobs.id));
  return query
  -- Records step 33: a job id only once released.
  select true, adder.workflow_id, jobs.name,
    case when jobs.released_at is not null then jobs.job_id end, jobs.id = any(new_ids)
  from json_array_elements(spec) with ordinality as element (value, n)
  join :RECORDS.workflow_jobs as jobs on jobs.workflow_id = adder.workflow_id
    and jobs.name = adder.name || '/' || (element.value ->> 'name')
  order by element.n;
end
$$;
