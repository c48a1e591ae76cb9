-- Workflows, cheaper to settle, and removed once finished (docs/guide/workflows.md, "Cost"
-- and "Retention"; delete_workflow, which deletes one now, is step 24's). The rules are still core/src/workflow.rs's and the tables step 11's; what
-- changes is how the functions apply them (docs/performance.md, "What a workflow's
-- dependency costs", has the profile that chose this):
-- - a release inserts its jobs into graphile_worker's table itself, each with an id drawn
--   beforehand, rather than through add_jobs and matching what it added back to the
--   workflow jobs (together half of a settlement's time);
-- - their statements run generic plans, written to be good ones (by primary keys and arrays):
--   left to choose, PostgreSQL planned them anew at each call (a custom plan of arrays it
--   knows the size of always looks cheaper than the generic one), which cost more than
--   running them when a statement settles one job; and none scans a table (enable_seqscan
--   off): plans made while workflow_jobs looked empty (statistics older than the rows, as
--   in a big add in one transaction) scanned it at every call, n^2 for n workflows added;
-- - a settlement of completed jobs only (the usual one: no cancellation can follow) counts
--   its dependents' settling dependencies in one pass, then counts them down and releases
--   those that reach 0 in two statements, each row written once: a row written twice in a
--   transaction costs a second version, its index entries and a foreign-key check of its
--   workflow.
-- Workers of earlier versions settle through the same trigger, so they get these functions.

-- Release the waiting jobs `ids` (rows this transaction has locked) of workflows not
-- cancelled, `settling[i]` of the jobs `ids[i]` waits for settling now (null: none; what a
-- release counts down with it, so the row is written once). Each is inserted into
-- graphile_worker's jobs as add_jobs would insert a job without a key (its task and queue
-- registered first if missing, the same notification), in id order, with the flag
-- `formica:workflow` (a Formica worker settles the job when it ends it); a callback's
-- payload gets its "batch".
drop function :RECORDS.release_workflow_jobs(bigint[]);
create function :RECORDS.release_workflow_jobs(ids bigint[], settling integer[] default null)
returns void language plpgsql
set search_path = pg_catalog, pg_temp set plan_cache_mode = force_generic_plan as $$
#variable_conflict use_column
declare
  -- The sequence graphile_worker's identity column draws from.
  job_ids regclass := pg_get_serial_sequence(':SCHEMA._private_jobs', 'id');
  released integer;
begin
  if coalesce(cardinality(ids), 0) = 0 then
    return;
  end if;
  -- A statement of its own, so the insert below sees them (as add_jobs registers them).
  with tasks_added as (
    insert into :SCHEMA._private_tasks (identifier)
    select distinct jobs.task_identifier from :RECORDS.workflow_jobs as jobs
    where jobs.id = any(ids) and not exists (
      select from :SCHEMA._private_tasks as tasks where tasks.identifier = jobs.task_identifier)
    on conflict do nothing
  )
  insert into :SCHEMA._private_job_queues (queue_name)
  select distinct jobs.queue_name from :RECORDS.workflow_jobs as jobs
  where jobs.id = any(ids) and jobs.queue_name is not null and not exists (
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

-- Rule 2 of core/src/workflow.rs for the jobs `settled`, which just settled with `outcomes`
-- ('completed', 'failed' or 'cancelled'): each waiting dependent counts the settlement down
-- and is released at 0 (or at once, a first_failure callback told of a failure), or is
-- cancelled (a failure, its policy 'cancel'), which settles it in turn: the next wave.
-- Every job this may change is locked first, in id order, so two transactions settling jobs
-- with dependents in common wait for each other rather than deadlock. What a job waits for
-- is counted in `pending`; another kind of wait adds its count there and releases through
-- release_workflow_jobs, as this does.
create or replace function :RECORDS.settle_workflow_jobs(settled bigint[], outcomes text[]) returns void
language plpgsql set search_path = pg_catalog, pg_temp set plan_cache_mode = force_generic_plan set enable_seqscan = off as $$
#variable_conflict use_column
declare
  failing boolean := 'failed' = any(outcomes) or 'cancelled' = any(outcomes);
  locked bigint[];
  counts integer[];
  ready boolean[];
  cancelled bigint[];
  releasing bigint[] := '{}';
begin
  if not failing then
    -- Completions only: no wave follows. How many of each dependent's dependencies settle
    -- now, counted in one pass over them (counted a dependent at a time, each count would compare every
    -- dependency with all of `settled`: n^2 for n settling).
    select coalesce(array_agg(hits.job order by hits.job), '{}'), coalesce(array_agg(hits.n order by hits.job), '{}')
    into locked, counts
    from (
      select dependencies.job, count(*)::int as n from :RECORDS.workflow_dependencies as dependencies
      where dependencies.depends_on = any(settled)
      group by dependencies.job
    ) as hits;
    -- Lock those still waiting (by the primary key, in id order); under the lock, `pending`
    -- is the last committed one.
    select coalesce(array_agg(dependents.id order by dependents.id), '{}'),
      coalesce(array_agg(dependents.n order by dependents.id), '{}'),
      coalesce(array_agg(dependents.pending = dependents.n order by dependents.id), '{}')
    into locked, counts, ready
    from (
      select jobs.id, jobs.pending, hits.n
      from unnest(locked, counts) as hits (id, n)
      join :RECORDS.workflow_jobs as jobs on jobs.id = hits.id
      where jobs.state = 'waiting'
      order by jobs.id
      for update of jobs
    ) as dependents;
    -- Those still waiting count down (none in a chain); those at 0 as they are released.
    if false = any(ready) then
      update :RECORDS.workflow_jobs as jobs
      set pending = jobs.pending - counted.n
      from unnest(locked, counts, ready) as counted (id, n, ready)
      where jobs.id = counted.id and not counted.ready;
    end if;
    perform :RECORDS.release_workflow_jobs(
      array(select counted.id from unnest(locked, ready) as counted (id, ready) where counted.ready),
      array(select counted.n from unnest(counts, ready) as counted (n, ready) where counted.ready));
    return;
  end if;
  -- A failure: lock the dependents and theirs, which a cancellation may reach.
  perform from :RECORDS.workflow_jobs as jobs
  where jobs.state = 'waiting' and jobs.id = any(array(
    with recursive reached (id) as (
      select dependencies.job from :RECORDS.workflow_dependencies as dependencies
      where dependencies.depends_on = any(settled)
      union
      select dependencies.job from reached
      join :RECORDS.workflow_dependencies as dependencies on dependencies.depends_on = reached.id
    )
    select reached.id from reached))
  order by jobs.id
  for update;
  loop
    with hits as (
      -- By the index (depends_on first), whatever the plan guesses of the arrays' sizes.
      select dependencies.job as id, count(*)::int as n, bool_or(wave.outcome <> 'completed') as bad
      from :RECORDS.workflow_dependencies as dependencies
      join unnest(settled, outcomes) as wave (id, outcome) on wave.id = dependencies.depends_on
      where dependencies.depends_on = any(settled)
      group by dependencies.job
    ),
    changed as (
      update :RECORDS.workflow_jobs as jobs
      set state = case when hits.bad and jobs.callback is null and jobs.on_dependency_failure = 'cancel'
          then 'cancelled' else 'waiting' end,
        pending = case when hits.bad and jobs.callback is null and jobs.on_dependency_failure = 'cancel'
          then jobs.pending else jobs.pending - hits.n end,
        finished_at = case when hits.bad and jobs.callback is null and jobs.on_dependency_failure = 'cancel'
          then now() end,
        last_error = case when hits.bad and jobs.callback is null and jobs.on_dependency_failure = 'cancel'
          then 'cancelled: a job it depends on did not complete' end
      from hits
      where jobs.id = hits.id and jobs.state = 'waiting'
      returning jobs.id, jobs.state, jobs.pending, jobs.callback, hits.bad
    )
    select coalesce(array_agg(changed.id) filter (where changed.state = 'cancelled'), '{}'),
      coalesce(array_agg(changed.id) filter (where changed.state = 'waiting'
        and (changed.pending = 0 or (changed.bad and changed.callback = 'first_failure'))), '{}')
    into cancelled, locked
    from changed;
    releasing := releasing || locked;
    exit when cardinality(cancelled) = 0;
    settled := cancelled;
    outcomes := array_fill('cancelled'::text, array[cardinality(cancelled)]);
  end loop;
  -- After every wave, so a callback's batch counts the jobs the waves cancelled.
  perform :RECORDS.release_workflow_jobs(releasing);
end
$$;

-- After a statement updates workflow jobs: settle those it settled (released before,
-- completed, failed or cancelled after) all at once, so their dependents are locked
-- together, in order. The statements that count down and release (this function's own,
-- nested) fire it too and settle nothing: a look at the old rows tells, before the join of
-- the two transition tables.
create or replace function :RECORDS.workflow_jobs_settled() returns trigger language plpgsql
set search_path = pg_catalog, pg_temp set plan_cache_mode = force_generic_plan as $$
#variable_conflict use_column
declare
  ids bigint[];
  outcomes text[];
begin
  if not exists (select from settled_before as before where before.state = 'released') then
    return null;
  end if;
  select array_agg(after.id order by after.id), array_agg(after.state order by after.id)
  into ids, outcomes
  from settled_after as after join settled_before as before on before.id = after.id
  where before.state = 'released' and after.state in ('completed', 'failed', 'cancelled');
  if ids is not null then
    perform :RECORDS.settle_workflow_jobs(ids, outcomes);
  end if;
  return null;
end
$$;

-- Retention: a finished workflow (no job waiting or released) goes with its rows once its
-- last job finished longer ago than the history keeps a job that ended as it did (its
-- state's retention: completed, failed or cancelled; null keeps it for ever). The pruner
-- finds the candidates by age: a workflow finished before a cutoff was created before it.
create index workflows_created_at on :RECORDS.workflows (created_at);

-- Whether workflow `workflow_id` has a job left to settle (waiting or released).
create function :RECORDS.workflow_unfinished(workflow_id bigint) returns boolean language sql stable
set search_path = pg_catalog, pg_temp as $$
  select exists (select from :RECORDS.workflow_jobs as jobs
    where jobs.workflow_id = workflow_unfinished.workflow_id and jobs.state in ('waiting', 'released'))
$$;

-- Called by the history's pruner (sql/src/history.rs, PRUNE) after its pass: delete at most
-- `batch` finished workflows past their retention as of `as_of`. Safe when every worker runs
-- it at once: each takes the workflows no one else holds (skip locked), and deletes one only
-- if, under the lock and in a statement of its own, it is still finished (retry_workflow
-- locks the workflow's row before it runs any job again). Returns the workflows deleted.
create function :RECORDS.prune_workflows(
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

-- workflow_batch (records step 11), which a release calls for a callback: no table scans either.
alter function :RECORDS.workflow_batch(bigint) set enable_seqscan = off;
