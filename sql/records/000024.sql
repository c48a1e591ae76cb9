-- Fan-out at runtime and sub-workflows (docs/guide/workflows.md, "Fan-out at runtime" and
-- "Sub-workflows"; rules 10 and 11 of core/src/workflow.rs).
--
-- Fan-out: a running workflow job's handler adds jobs to its own workflow
-- (add_workflow_jobs). Each is named "<adder>/<name>", unique in the workflow, so a retry of
-- a killed adder that adds the same jobs again adds nothing (the insert skips names taken);
-- the adder's row is locked first, so the add and the adder's settling are ordered: an add
-- after the adder settled is refused, and a settling after an add sees its jobs. The jobs
-- the adder's dependents wait for grow by the jobs added: a fan-in after a fan-out waits for
-- all of it.
--
-- Sub-workflows: a workflow job may hold a whole workflow instead of a job (the column
-- `workflow`). Released, it adds that workflow (start_subworkflows) and stays released, with
-- no graphile_worker job, until every job of it has settled (finish_subworkflows, from the
-- settling trigger): then it completes (every job completed, its output the outputs of the
-- sub-workflow's jobs by name), fails, or is cancelled (the sub-workflow cancelled), which
-- settles its dependents as any job settling does. cancel_workflow cancels the running
-- sub-workflows of what it cancels (the driver, in the same transaction); delete_workflow
-- refuses to delete one its job waits for, or forced, fails that job first.

alter table :RECORDS.workflow_jobs
  -- A sub-workflow job: the workflow it adds when released, {"name": ..., "jobs": [...]} as
  -- add_workflow takes them. Null: an ordinary job.
  add column workflow json,
  -- The workflow a sub-workflow job added when released (the last one, if retried).
  add column subworkflow_id bigint references :RECORDS.workflows (id) on delete set null;
-- The sub-workflow jobs waiting for their workflow: what a settling looks its workflow up in
-- (nothing for workflows that have none).
create index workflow_jobs_subworkflow on :RECORDS.workflow_jobs (subworkflow_id)
  where subworkflow_id is not null;

-- Add the workflow `workflow_name` of the jobs `spec` (a JSON array, validated by the driver
-- beforehand: core/src/workflow.rs's Graph), each an object with the columns of
-- workflow_jobs it sets and "depends_on", the names of the jobs it waits for; those with
-- nothing to wait for are released at once. Rows: the workflow's id, with each job released
-- (its name and graphile_worker job id). Records step 11's, with step 23's signals and timers
-- (marked "Records step 23") and "workflow" (a sub-workflow) beside each job's columns: a
-- released sub-workflow job (no graphile_worker job) is not among the rows, and a workflow
-- none of whose jobs was added answers one row of its id and nulls.
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
  return query select added, jobs.name, jobs.job_id from :RECORDS.workflow_jobs as jobs
    where jobs.workflow_id = added and jobs.state = 'released' and jobs.job_id is not null
    order by jobs.id;
  -- Records step 23: every job may wait for a signal (step 24: or be a sub-workflow); the id
  -- still comes back.
  if not found then
    return query select added, null::text, null::bigint;
  end if;
end
$$;

-- Release the sub-workflow jobs among the waiting jobs `ids` (locked by the caller) of
-- workflows not cancelled: each adds its workflow and is released without a
-- graphile_worker job, counting down `settling` (parallel to `ids`, as release_workflow_jobs
-- takes it). release_workflow_jobs calls it first, so it releases the others. It and
-- finish_subworkflows run generic plans, as step 22's settling functions: they run at every
-- release and settling, and planning anew at each call costs more than running.
create function :RECORDS.start_subworkflows(ids bigint[], settling integer[] default null)
returns void language plpgsql
set search_path = pg_catalog, pg_temp set plan_cache_mode = force_generic_plan set enable_seqscan = off as $$
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
      pending = jobs.pending - job.settling
    where jobs.id = job.id;
  end loop;
end
$$;

-- Settle the sub-workflow jobs of the workflows `ended` whose every job has settled: as the
-- workflow ended (rule 5's state: completed, failed, or cancelled), the completed one's
-- output the outputs of the sub-workflow's jobs by name. The settling trigger calls it with
-- the workflows of the jobs it settled, cancel_workflow with those it cancelled. The
-- sub-workflow job is locked before its workflow's jobs are counted, so of two transactions
-- settling the last two jobs of one sub-workflow, the second sees the first's and settles it.
create function :RECORDS.finish_subworkflows(ended bigint[]) returns void language plpgsql
set search_path = pg_catalog, pg_temp set plan_cache_mode = force_generic_plan set enable_seqscan = off as $$
#variable_conflict use_column
declare
  parents bigint[];
begin
  select array_agg(jobs.id) into parents from (
    select jobs.id from :RECORDS.workflow_jobs as jobs
    where jobs.subworkflow_id = any(ended) and jobs.state = 'released'
    order by jobs.id
    for update
  ) as jobs;
  if parents is null then
    return;
  end if;
  -- A statement of its own, after the locks: it sees what the transactions it waited for
  -- committed.
  update :RECORDS.workflow_jobs as jobs
  set state = ends.outcome, finished_at = now(),
    output = case when ends.outcome = 'completed' then ends.outputs end,
    last_error = case when ends.outcome <> 'completed'
      then format('%s: sub-workflow %s %s', ends.outcome, ends.id, ends.state) end
  from (
    select states.id, states.state,
      case states.state when 'completed' then 'completed' when 'failed' then 'failed'
        else 'cancelled' end as outcome,
      (select coalesce(jsonb_object_agg(child.name, child.output)
          filter (where child.output is not null), '{}')::json
        from :RECORDS.workflow_jobs as child where child.workflow_id = states.id) as outputs
    from :RECORDS.workflow_states as states
    where states.id in (select jobs.subworkflow_id from :RECORDS.workflow_jobs as jobs
        where jobs.id = any(parents))
      and states.waiting + states.released = 0
  ) as ends
  where jobs.subworkflow_id = ends.id and jobs.id = any(parents) and jobs.state = 'released';
end
$$;

-- Add the jobs `spec` (as add_workflow takes them, validated by the driver: their
-- dependencies name jobs of `spec`) to the workflow of the running workflow job whose
-- graphile_worker job is `adder_job_id`, each named "<adder>/<name>" (those whose name is
-- taken, added by an earlier run of the adder, are left as they are). The adder's
-- dependents wait for the jobs added too; jobs added to a cancelled workflow are cancelled.
-- Rows: whether the adder was found released (false: one row, nothing added), then each
-- job of `spec` (its name in the workflow, its job id if released, whether this call added
-- it).
create function :RECORDS.add_workflow_jobs(adder_job_id bigint, spec json)
returns table (found boolean, workflow_id bigint, name text, job_id bigint, added boolean)
language plpgsql set search_path = pg_catalog, pg_temp set enable_seqscan = off as $$
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
  select true, adder.workflow_id, jobs.name, jobs.job_id, jobs.id = any(new_ids)
  from json_array_elements(spec) with ordinality as element (value, n)
  join :RECORDS.workflow_jobs as jobs on jobs.workflow_id = adder.workflow_id
    and jobs.name = adder.name || '/' || (element.value ->> 'name')
  order by element.n;
end
$$;

-- release_workflow_jobs (records step 22's), keeping back first the jobs that still wait for
-- their signal (step 23's workflow_jobs_ready: marked "Records step 23"), then starting the
-- sub-workflow jobs among `ids` (marked "Records step 24").
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
  ready := :RECORDS.workflow_jobs_ready(ids);
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
  perform :RECORDS.start_subworkflows(ids, settling);
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

-- The settling trigger's function (records step 22's), settling the sub-workflow jobs of
-- the workflows whose jobs it settled (the part marked "Records step 24"), and matching the
-- old and new rows without a join: step 22's join of the transition tables, planned once at
-- a first settling of one job, stayed a nested loop, n^2 for a statement of hundreds.
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
    perform :RECORDS.finish_subworkflows(workflows);
  end if;
  return null;
end
$$;

-- resolve_workflows (records step 11), leaving out the sub-workflow jobs (released without a
-- graphile_worker job): the one condition added is `jobs.job_id is not null`.
create or replace function :RECORDS.resolve_workflows() returns bigint language plpgsql
set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
  settled bigint;
begin
  if not pg_try_advisory_xact_lock(hashtext('formica resolve_workflows :RECORDS')) then
    return null;
  end if;
  with found as (
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
    order by jobs.id
  ),
  changed as (
    update :RECORDS.workflow_jobs as jobs
    set state = found.outcome, finished_at = now(),
      last_error = case when found.outcome = 'completed' then null else found.last_error end
    from found
    where jobs.id = found.id and jobs.state = 'released'
    returning jobs.id
  )
  select count(*) into settled from changed;
  return settled;
end
$$;

-- time_out_workflow_signals (records step 23's): the part added is marked "Records step 24".
create or replace function :RECORDS.time_out_workflow_signals() returns bigint language plpgsql
set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
  locked bigint[];
  releasing bigint[];
  cancelling bigint[];
begin
  locked := array(
    select jobs.id from :RECORDS.workflow_jobs as jobs
    where jobs.id = any(array(select waits.job from :RECORDS.workflow_waits as waits
        where waits.signal_deadline <= now() and waits.signalled_at is null and waits.timed_out_at is null))
      and jobs.state = 'waiting'
    order by jobs.id
    for update);
  if cardinality(locked) = 0 then
    return 0;
  end if;
  -- Read again once locked: a signal that committed meanwhile wins.
  with expired as (
    update :RECORDS.workflow_waits as waits
    set timed_out_at = clock_timestamp()
    from :RECORDS.workflow_jobs as jobs
    where waits.job = any(locked) and jobs.id = waits.job and jobs.state = 'waiting'
      and waits.signalled_at is null and waits.timed_out_at is null and waits.signal_deadline <= now()
    returning waits.job, waits.on_signal_timeout
  )
  select coalesce(array_agg(expired.job order by expired.job) filter (where expired.on_signal_timeout = 'release'), '{}'),
    coalesce(array_agg(expired.job order by expired.job) filter (where expired.on_signal_timeout = 'cancel'), '{}')
  into releasing, cancelling
  from expired;
  perform :RECORDS.release_workflow_jobs(releasing);
  update :RECORDS.workflow_jobs as jobs
  set state = 'cancelled', finished_at = now(),
    last_error = 'cancelled: the signal ' || quote_literal(waits.signal) || ' did not come within '
      || waits.signal_timeout::text
  from :RECORDS.workflow_waits as waits
  where waits.job = jobs.id and jobs.id = any(cancelling);
  if cardinality(cancelling) > 0 then
    perform :RECORDS.settle_workflow_jobs(cancelling,
      array_fill('cancelled'::text, array[cardinality(cancelling)]));
    -- Records step 24: a sub-workflow whose last job this cancelled settles its job.
    perform :RECORDS.finish_subworkflows(array(
      select distinct jobs.workflow_id from :RECORDS.workflow_jobs as jobs where jobs.id = any(cancelling)));
  end if;
  return cardinality(releasing) + cardinality(cancelling);
end
$$;

-- Retention (records step 22) of workflows with sub-workflows: a workflow deleted (by the
-- pruner, delete_workflow or by hand) takes the sub-workflows its jobs added with it, and
-- theirs; the pruner takes a sub-workflow only with the workflow that holds it (one finishes
-- no later than its job, so it is past its retention when that workflow is), so two pruners
-- never hold a workflow and its sub-workflow each. Each deleted workflow costs one look-up of
-- its jobs by the workflow_id key.
create function :RECORDS.workflow_deleted() returns trigger language plpgsql
set search_path = pg_catalog, pg_temp as $$
begin
  delete from :RECORDS.workflows as workflows
  where workflows.id in (select jobs.subworkflow_id from :RECORDS.workflow_jobs as jobs
    where jobs.workflow_id = old.id and jobs.subworkflow_id is not null);
  return old;
end
$$;
-- Before: the jobs naming the sub-workflows are still there (the cascade deletes them after).
create trigger workflow_deleted before delete on :RECORDS.workflows
for each row execute function :RECORDS.workflow_deleted();

-- prune_workflows (records step 22's), leaving out the sub-workflows: the part added is
-- marked "Records step 24".
create or replace function :RECORDS.prune_workflows(
  as_of timestamptz, completed interval, failed interval, cancelled interval, batch integer
) returns bigint language plpgsql set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
  held bigint[];
  n bigint;
begin
  select coalesce(array_agg(candidates.id), '{}') into held from (
    select workflows.id from :RECORDS.workflows as workflows
    -- least ignores a null: the shortest retention kept.
    where workflows.created_at < as_of - least(completed, failed, cancelled)
      and not :RECORDS.workflow_unfinished(workflows.id)
      -- Records step 24: a sub-workflow goes with the workflow that holds it.
      and not exists (select from :RECORDS.workflow_jobs as parents where parents.subworkflow_id = workflows.id)
      and (
        select coalesce(max(jobs.finished_at), workflows.created_at) < as_of - case
            when workflows.cancelled_at is not null then cancelled
            when bool_and(jobs.state = 'completed') then completed
            else failed
          end
        from :RECORDS.workflow_jobs as jobs where jobs.workflow_id = workflows.id)
    order by workflows.created_at
    limit batch
    for update of workflows skip locked
  ) as candidates;
  delete from :RECORDS.workflows as workflows
  where workflows.id = any(held) and not :RECORDS.workflow_unfinished(workflows.id);
  get diagnostics n = row_count;
  return n;
end
$$;

-- Delete workflow `deleted` and its rows now, if it is finished or `force` (docs/guide/
-- workflows.md, "Retention"). Row: 'missing' (no such workflow), 'held' (refused: a released
-- sub-workflow job waits for it, named with its workflow), 'unfinished' (refused: not
-- forced), or 'deleted'; with how many of its jobs were waiting (never released now) and
-- released (their graphile_worker jobs stay, and run as jobs nothing waits for) when it was
-- deleted. A sub-workflow deleted before every job of it settled would leave the job holding
-- it released for ever (rule 11 of core/src/workflow.rs): forced, that job fails first ("its
-- sub-workflow N was deleted"), in the same transaction, and settles as any failure does
-- (the settling trigger: its dependents cancelled or released by their policy, and its own
-- workflow's end settles the job holding that one).
create function :RECORDS.delete_workflow(deleted bigint, force boolean)
returns table (state text, waiting integer, released integer, parent_workflow bigint, parent_job text)
language plpgsql set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
  waiting integer;
  released integer;
  holder record;
begin
  perform from :RECORDS.workflows as workflows where workflows.id = deleted for update;
  if not found then
    return query select 'missing', 0, 0, null::bigint, null::text;
    return;
  end if;
  -- Its jobs, then the job holding it: the order a settling of its last job locks them in,
  -- so one under way commits first (and settles that job itself), never a deadlock with it.
  perform from :RECORDS.workflow_jobs as jobs where jobs.workflow_id = deleted order by jobs.id for update;
  select jobs.id, jobs.workflow_id, jobs.name into holder
  from :RECORDS.workflow_jobs as jobs
  where jobs.subworkflow_id = deleted and jobs.state = 'released'
  for update;
  select (count(*) filter (where jobs.state = 'waiting'))::int,
    (count(*) filter (where jobs.state = 'released'))::int
  into waiting, released
  from :RECORDS.workflow_jobs as jobs where jobs.workflow_id = deleted;
  if not force and holder.id is not null then
    return query select 'held', waiting, released, holder.workflow_id, holder.name;
    return;
  end if;
  if waiting + released > 0 and not force then
    return query select 'unfinished', waiting, released, null::bigint, null::text;
    return;
  end if;
  if holder.id is not null then
    update :RECORDS.workflow_jobs as jobs
    set state = 'failed', finished_at = now(), last_error = format('its sub-workflow %s was deleted', deleted)
    where jobs.id = holder.id;
  end if;
  delete from :RECORDS.workflows as workflows where workflows.id = deleted;
  return query select 'deleted', waiting, released, holder.workflow_id, holder.name;
end
$$;
