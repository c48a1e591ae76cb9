-- Workflows (docs/guide/workflows.md): sets of jobs added together, where a job may wait for
-- others of its set. A job with nothing to wait for is added to graphile_worker's jobs at
-- once; the others wait here, as rows of workflow_jobs, and are added (released) only when
-- what they wait for has settled, so graphile-worker's workers never see a job that is not
-- released. The rules (what releases, cancels or fires a job) are core/src/workflow.rs's;
-- this schema applies them, and tests/tests/workflow_differential.rs compares the two.

create table :RECORDS.workflows (
  id bigint generated always as identity primary key,
  name text not null,
  created_at timestamptz not null default now(),
  -- Set by cancel_workflow: nothing of the workflow is released after it.
  cancelled_at timestamptz,
  cancel_reason text
);

create table :RECORDS.workflow_jobs (
  id bigint generated always as identity primary key,
  workflow_id bigint not null references :RECORDS.workflows (id) on delete cascade,
  -- Unique in its workflow: how dependencies, callbacks' outputs and users name it.
  name text not null,
  -- The job to add when released (graphile_worker.add_job's arguments; no job key: a key
  -- would let another add replace or remove the job behind the workflow's back).
  task_identifier text not null,
  payload json not null,
  queue_name text,
  run_at timestamptz,
  max_attempts smallint,
  priority smallint,
  flags text[],
  -- When a job it depends on fails for good or is cancelled: it is cancelled ('cancel') or
  -- still released once all it depends on has settled ('release').
  on_dependency_failure text not null default 'cancel'
    check (on_dependency_failure in ('cancel', 'release')),
  -- A batch callback: released once all it depends on has settled ('all_finished'), or at the
  -- first of them to fail for good ('first_failure'), its payload given the counts and
  -- outputs of what it depends on. Null: an ordinary job.
  callback text check (callback in ('all_finished', 'first_failure')),
  state text not null
    check (state in ('waiting', 'released', 'completed', 'failed', 'cancelled')),
  -- How many of the jobs it depends on have not settled yet (a waiting job is released when
  -- this reaches 0): a counter each settling decrements under the row's lock, so two
  -- dependencies settling at once on two workers both count, and only one releases it.
  pending integer not null check (pending >= 0),
  -- The graphile_worker job while released (and the last one after it settled).
  job_id bigint,
  -- What the handler returned (a Formica worker that writes history), for callbacks.
  output json,
  last_error text,
  released_at timestamptz,
  finished_at timestamptz,
  unique (workflow_id, name)
);
-- The jobs that may still settle, by their graphile_worker job: what a completion, a
-- failure and the resolver look up.
create index workflow_jobs_released on :RECORDS.workflow_jobs (job_id) where state = 'released';

create table :RECORDS.workflow_dependencies (
  job bigint not null references :RECORDS.workflow_jobs (id) on delete cascade,
  depends_on bigint not null references :RECORDS.workflow_jobs (id) on delete cascade,
  primary key (depends_on, job)
);
create index workflow_dependencies_job on :RECORDS.workflow_dependencies (job);

-- A workflow's state, from its jobs': cancelled once cancel_workflow ran; running while a
-- job waits or is released; completed when every job completed; failed otherwise.
create view :RECORDS.workflow_states as
select workflows.id, workflows.name, workflows.created_at, workflows.cancelled_at,
  case
    when workflows.cancelled_at is not null then 'cancelled'
    when counts.waiting + counts.released > 0 then 'running'
    when counts.completed = counts.total then 'completed'
    else 'failed'
  end as state,
  counts.total, counts.waiting, counts.released, counts.completed, counts.failed, counts.cancelled
from :RECORDS.workflows as workflows
cross join lateral (
  select count(*)::int as total,
    (count(*) filter (where jobs.state = 'waiting'))::int as waiting,
    (count(*) filter (where jobs.state = 'released'))::int as released,
    (count(*) filter (where jobs.state = 'completed'))::int as completed,
    (count(*) filter (where jobs.state = 'failed'))::int as failed,
    (count(*) filter (where jobs.state = 'cancelled'))::int as cancelled
  from :RECORDS.workflow_jobs as jobs
  where jobs.workflow_id = workflows.id
) as counts;

-- The payload a callback gets under "batch": counts of the jobs it depends on by how they
-- settled (waiting or released: unfinished), and the outputs kept of those that have one.
create function :RECORDS.workflow_batch(callback_id bigint) returns jsonb language sql stable
set search_path = pg_catalog, pg_temp as $$
  select jsonb_build_object(
    'completed', count(*) filter (where jobs.state = 'completed'),
    'failed', count(*) filter (where jobs.state = 'failed'),
    'cancelled', count(*) filter (where jobs.state = 'cancelled'),
    'unfinished', count(*) filter (where jobs.state in ('waiting', 'released')),
    'outputs', coalesce(jsonb_object_agg(jobs.name, jobs.output) filter (where jobs.output is not null), '{}'))
  from :RECORDS.workflow_dependencies as dependencies
  join :RECORDS.workflow_jobs as jobs on jobs.id = dependencies.depends_on
  where dependencies.job = callback_id
$$;

-- Release the waiting jobs `ids` (rows this transaction has locked) of workflows not
-- cancelled: all are added in one call of graphile-worker's own add_jobs (an add_job each
-- would cost about a millisecond a job), without a job key, and each remembers its job id. A
-- callback's payload gets its "batch". add_jobs's rows are matched to the jobs by what they
-- hold (jobs that hold the same are interchangeable), in id order among equals.
create function :RECORDS.release_workflow_jobs(ids bigint[]) returns void language plpgsql
set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
  owners bigint[];
  specs :SCHEMA.job_spec[];
  added :SCHEMA._private_jobs[];
  released bigint;
begin
  select array_agg(jobs.id order by jobs.id), array_agg(row(jobs.task_identifier,
      case when jobs.callback is null then jobs.payload
        else (jobs.payload::jsonb || jsonb_build_object('batch', :RECORDS.workflow_batch(jobs.id)))::json end,
      jobs.queue_name, jobs.run_at, jobs.max_attempts, null, jobs.priority,
      -- The flag tells a Formica worker to settle the job when it ends it (the driver).
      array_append(coalesce(jobs.flags, '{}'), 'formica:workflow')):: :SCHEMA.job_spec
      order by jobs.id)
  into owners, specs
  from :RECORDS.workflow_jobs as jobs
  join :RECORDS.workflows as workflows on workflows.id = jobs.workflow_id
  where jobs.id = any(ids) and jobs.state = 'waiting' and workflows.cancelled_at is null;
  if owners is null then
    return;
  end if;
  select array_agg(job) into added from :SCHEMA.add_jobs(specs) as job;
  -- A statement of its own: it sees the tasks and queues add_jobs registered.
  with wanted as (
    select owners[spec.n] as id, jsonb_build_array(spec.identifier, spec.payload::text,
        spec.queue_name, coalesce(spec.run_at, now()), coalesce(spec.max_attempts, 25),
        coalesce(spec.priority, 0),
        (select jsonb_object_agg(flag, true) from unnest(spec.flags) as flag)) as holds
    from unnest(specs) with ordinality as spec (identifier, payload, queue_name, run_at,
      max_attempts, job_key, priority, flags, n)
  ),
  got as (
    select job.id, jsonb_build_array(tasks.identifier, job.payload::text, job_queues.queue_name,
        job.run_at, job.max_attempts, job.priority, job.flags) as holds
    from unnest(added) as job
    join :SCHEMA._private_tasks as tasks on tasks.id = job.task_id
    left join :SCHEMA._private_job_queues as job_queues on job_queues.id = job.job_queue_id
  ),
  -- Both sorted by what they hold, then by id, pair up one to one.
  matched as (
    select * from unnest(
      array(select wanted.id from wanted order by wanted.holds::text, wanted.id),
      array(select wanted.holds from wanted order by wanted.holds::text, wanted.id),
      array(select got.id from got order by got.holds::text, got.id),
      array(select got.holds from got order by got.holds::text, got.id)
    ) as matched (id, wanted, job_id, got)
  )
  update :RECORDS.workflow_jobs as jobs
  -- The clock, not the transaction's start: the resolver's statements see what committed
  -- after its transaction began, and a release is never dated before what caused it.
  set state = 'released', released_at = clock_timestamp(), job_id = matched.job_id
  from matched
  where jobs.id = matched.id and matched.wanted = matched.got;
  get diagnostics released = row_count;
  if released <> cardinality(owners) then
    raise exception 'add_jobs added % jobs for the % workflow jobs released', cardinality(added),
      cardinality(owners);
  end if;
end
$$;

-- Rule 2 of core/src/workflow.rs for the jobs `settled`, which just settled with `outcomes`
-- ('completed', 'failed' or 'cancelled'): each waiting dependent counts the settlement down
-- and is released at 0 (or at once, a first_failure callback told of a failure), or is
-- cancelled (a failure, its policy 'cancel'), which settles it in turn: the loop's next wave.
-- Every job this may change is locked first, in id order, so two transactions settling jobs
-- with dependents in common wait for each other rather than deadlock.
create function :RECORDS.settle_workflow_jobs(settled bigint[], outcomes text[]) returns void
language plpgsql set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
  failing boolean := 'failed' = any(outcomes) or 'cancelled' = any(outcomes);
  cancelled bigint[];
  ready bigint[];
  releasing bigint[] := '{}';
begin
  -- By the primary key (an array, not a join the generic plan may turn into a scan of
  -- every workflow job).
  perform from :RECORDS.workflow_jobs as jobs
  where jobs.state = 'waiting' and jobs.id = any(array(
    -- The dependents of the settled jobs, and theirs if a failure may cancel them.
    with recursive reached (id) as (
      select dependencies.job from :RECORDS.workflow_dependencies as dependencies
      where dependencies.depends_on = any(settled)
      union
      select dependencies.job from reached
      join :RECORDS.workflow_dependencies as dependencies on dependencies.depends_on = reached.id
      where failing
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
    into cancelled, ready
    from changed;
    releasing := releasing || ready;
    exit when cardinality(cancelled) = 0;
    settled := cancelled;
    outcomes := array_fill('cancelled'::text, array[cardinality(cancelled)]);
  end loop;
  perform :RECORDS.release_workflow_jobs(releasing);
end
$$;

-- After a statement settles released jobs (a worker's completion or failure, the resolver),
-- settle_workflow_jobs runs once for all of them, so their dependents are locked together,
-- in order. A statement trigger: a row trigger would read the whole transition table once
-- a row (a statement settling n jobs cost n^2). Only statements that update workflow_jobs
-- fire it: a worker's plain completions and failures never do.
create function :RECORDS.workflow_jobs_settled() returns trigger language plpgsql
set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
  ids bigint[];
  outcomes text[];
begin
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

create trigger workflow_jobs_settled after update on :RECORDS.workflow_jobs
referencing old table as settled_before new table as settled_after
for each statement execute function :RECORDS.workflow_jobs_settled();

-- Add the workflow `workflow_name` of the jobs `spec` (a JSON array, validated by the driver
-- beforehand: core/src/workflow.rs's Graph), each an object with the columns of
-- workflow_jobs it sets and "depends_on", the names of the jobs it waits for. Those with
-- nothing to wait for are released at once. Rows: the workflow's id, with each job released
-- (its name and graphile_worker job id).
create function :RECORDS.add_workflow(workflow_name text, spec json)
returns table (workflow_id bigint, name text, job_id bigint) language plpgsql
set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
  added bigint;
begin
  insert into :RECORDS.workflows (name) values (workflow_name) returning id into added;
  insert into :RECORDS.workflow_jobs (workflow_id, name, task_identifier, payload, queue_name,
    run_at, max_attempts, priority, flags, on_dependency_failure, callback, state, pending)
  select added, job.name, job.task_identifier, job.payload, job.queue_name, job.run_at,
    job.max_attempts, job.priority, job.flags, coalesce(job.on_dependency_failure, 'cancel'),
    job.callback, 'waiting',
    (select count(distinct dependency) from json_array_elements_text(job.depends_on) as dependency)
  from json_array_elements(spec) with ordinality as element (value, n)
  cross join lateral json_to_record(element.value) as job (name text, task_identifier text,
    payload json, queue_name text, run_at timestamptz, max_attempts smallint, priority smallint,
    flags text[], on_dependency_failure text, callback text, depends_on json)
  order by element.n;
  insert into :RECORDS.workflow_dependencies (job, depends_on)
  select distinct jobs.id, dependencies.id
  from json_array_elements(spec) as element (value)
  cross join lateral json_array_elements_text(element.value -> 'depends_on') as dependency (name)
  join :RECORDS.workflow_jobs as jobs
    on jobs.workflow_id = added and jobs.name = element.value ->> 'name'
  join :RECORDS.workflow_jobs as dependencies
    on dependencies.workflow_id = added and dependencies.name = dependency.name;
  perform :RECORDS.release_workflow_jobs(array(
    select jobs.id from :RECORDS.workflow_jobs as jobs
    where jobs.workflow_id = added and jobs.pending = 0 order by jobs.id));
  return query select added, jobs.name, jobs.job_id from :RECORDS.workflow_jobs as jobs
    where jobs.workflow_id = added and jobs.state = 'released' order by jobs.id;
end
$$;

-- One pass of the resolver: settle the released jobs whose graphile_worker job settled
-- without a Formica worker's statement telling (graphile-worker's workers, complete_jobs,
-- remove_job, a raw delete). A job gone is completed, unless Formica's history recorded it
-- failed or cancelled; a job out of attempts and not locked failed, or was cancelled if its
-- error begins "cancelled: " (Formica's cancel). Passes never overlap across workers (a
-- transaction's advisory lock: a worker finding it taken skips its pass). Returns the jobs
-- settled, null if another pass was running.
create function :RECORDS.resolve_workflows() returns bigint language plpgsql
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
    where jobs.state = 'released'
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

-- Run the workflow `retried`'s failed jobs again (rule 6 of core/src/workflow.rs): one whose
-- graphile_worker job is still there, out of attempts and not locked, is rescheduled with its
-- attempts at 0; the others are added anew (a callback's batch counted again). The jobs
-- cancelled because of a dependency (never released) wait again, and every waiting job
-- counts what it waits for afresh. Rows: the workflow's state before ('missing' if there is
-- none; a cancelled one is left as it is), and the jobs run again and put back to wait.
create function :RECORDS.retry_workflow(retried bigint)
returns table (state text, rerun bigint[], rewaiting bigint[]) language plpgsql
set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
  cancelled_at timestamptz;
  failed bigint[];
  rescheduled bigint[];
  back bigint[];
  freed_now bigint[];
begin
  select workflows.cancelled_at into cancelled_at from :RECORDS.workflows as workflows
  where workflows.id = retried for update;
  if not found then
    return query select 'missing', '{}'::bigint[], '{}'::bigint[];
    return;
  end if;
  if cancelled_at is not null then
    return query select 'cancelled', '{}'::bigint[], '{}'::bigint[];
    return;
  end if;
  select coalesce(array_agg(jobs.id order by jobs.id) filter (where jobs.state = 'failed'), '{}')
  into failed
  from (select jobs.id, jobs.state, jobs.released_at from :RECORDS.workflow_jobs as jobs
    where jobs.workflow_id = retried and jobs.state in ('failed', 'cancelled')
    order by jobs.id for update) as jobs;
  with again as (
    select (:SCHEMA.reschedule_jobs(array(
      select live.id from :RECORDS.workflow_jobs as jobs
      join :SCHEMA._private_jobs as live on live.id = jobs.job_id
      where jobs.id = any(failed) and live.attempts >= live.max_attempts and live.locked_at is null),
      now(), null, 0, null)).id
  ),
  marked as (
    update :RECORDS.workflow_jobs as jobs
    set state = 'released', released_at = clock_timestamp(), finished_at = null, last_error = null
    from again where jobs.job_id = again.id and jobs.id = any(failed)
    returning jobs.id
  )
  select coalesce(array_agg(marked.id), '{}') into rescheduled from marked;
  -- The rest are added anew, as a release adds them.
  update :RECORDS.workflow_jobs as jobs
  set state = 'waiting', pending = 0, finished_at = null, last_error = null, output = null
  where jobs.id = any(failed) and jobs.id <> all(rescheduled);
  perform :RECORDS.release_workflow_jobs(array(
    select id from unnest(failed) as id where id <> all(rescheduled)));
  -- Those cancelled because of a dependency wait again, unless one they would cancel on
  -- stays failed or cancelled (they would wait for ever): from the first jobs on, so one
  -- brought back frees its dependents in the next round.
  back := '{}';
  loop
    with freed as (
      update :RECORDS.workflow_jobs as jobs
      set state = 'waiting', finished_at = null, last_error = null
      where jobs.workflow_id = retried and jobs.state = 'cancelled' and jobs.released_at is null
        and not (jobs.callback is null and jobs.on_dependency_failure = 'cancel' and exists (
          select from :RECORDS.workflow_dependencies as dependencies
          join :RECORDS.workflow_jobs as dependency on dependency.id = dependencies.depends_on
          where dependencies.job = jobs.id and dependency.state in ('failed', 'cancelled')))
      returning jobs.id
    )
    select coalesce(array_agg(freed.id), '{}') into freed_now from freed;
    exit when cardinality(freed_now) = 0;
    back := back || freed_now;
  end loop;
  -- Every waiting job counts its dependencies not settled afresh: one run again counts once
  -- more when it settles again.
  update :RECORDS.workflow_jobs as jobs
  set pending = (
    select count(*) from :RECORDS.workflow_dependencies as dependencies
    join :RECORDS.workflow_jobs as dependency on dependency.id = dependencies.depends_on
    where dependencies.job = jobs.id and dependency.state in ('waiting', 'released'))
  where jobs.workflow_id = retried and jobs.state = 'waiting';
  back := array(select id from unnest(back) as id order by id);
  return query select 'retried', failed, back;
end
$$;
