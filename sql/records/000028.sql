-- Workflow jobs cheaper to add and to settle (docs/performance.md, "What a workflow's
-- dependency costs", has the profile behind each change); the rules are unchanged.
-- - The functions an add, a release or a settling runs never scan a table: their statements
--   go by primary keys and arrays, and a plan chosen while a table looked empty (its
--   statistics older than the rows; all of a big add in one transaction) scanned
--   workflow_jobs at each call, so adding n workflows in one statement cost n^2.
-- - The settling trigger matches the old and new rows in n log n: its join of the
--   transition tables, planned at a first settling of one job, was a nested loop, n^2 at a
--   later one of hundreds.
-- - A settlement of completions counts its dependents' settling dependencies in one pass.
-- - add_workflow_waits is PL/pgSQL, so its statement is planned once a session, not at every
--   add (an SQL function's body is planned at each call).

do $$
declare
  f regprocedure;
begin
  for f in
    select functions.oid::regprocedure from pg_proc as functions
    where functions.pronamespace = ':RECORDS'::regnamespace and functions.proname in (
      'add_workflow', 'add_workflow_jobs', 'release_workflow_jobs', 'start_subworkflows',
      'workflow_jobs_ready', 'finish_subworkflows', 'workflow_batch', 'signal_workflow')
  loop
    execute format('alter function %s set enable_seqscan = off', f);
  end loop;
end
$$;

-- settle_workflow_jobs (records step 22's), its completions' dependents counted in one pass:
-- the part changed is marked "records step 28".
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
    -- now, counted in one pass over them (records step 28: counted a dependent at a time,
    -- each count compared every dependency with all of `settled`, n^2 for n settling).
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

-- The settling trigger's function (records step 24's), matching old and new rows in n log n
-- and taking the settled jobs' workflows from the same pass.
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
  -- Each new row looked up by id in one object of the old rows' states (a binary search),
  -- whatever the plan (a join of the two tables, planned once, stays the nested loop
  -- chosen for the one row of a first settling: n^2 for hundreds).
  select array_agg(after.id order by after.id), array_agg(after.state order by after.id),
    array_agg(distinct after.workflow_id)
  from settled_after as after,
    (select jsonb_object_agg(before.id::text, before.state) as states from settled_before as before) as old
  where old.states ->> after.id::text = 'released' and after.state in ('completed', 'failed', 'cancelled')
  into ids, outcomes, workflows;
  if ids is not null then
    perform :RECORDS.settle_workflow_jobs(ids, outcomes);
    -- The sub-workflows that ended with them settle their jobs.
    perform :RECORDS.finish_subworkflows(workflows);
  end if;
  return null;
end
$$;

-- add_workflow_waits (records step 23's), the same statement in PL/pgSQL.
create or replace function :RECORDS.add_workflow_waits(added bigint, spec json, prefix text default '')
returns void language plpgsql set search_path = pg_catalog, pg_temp set enable_seqscan = off as $$
#variable_conflict use_column
begin
  insert into :RECORDS.workflow_waits (job, workflow_id, delay, signal, signal_timeout, on_signal_timeout)
  select jobs.id, added, make_interval(secs => (element.value ->> 'delay')::float8),
    element.value -> 'signal' ->> 'name',
    make_interval(secs => (element.value -> 'signal' ->> 'timeout')::float8),
    coalesce(element.value -> 'signal' ->> 'on_timeout', 'cancel')
  from json_array_elements(spec) as element (value)
  join :RECORDS.workflow_jobs as jobs
    on jobs.workflow_id = added and jobs.name = prefix || (element.value ->> 'name')
  where json_typeof(element.value -> 'delay') = 'number' or json_typeof(element.value -> 'signal') = 'object'
  on conflict (job) do nothing;
end
$$;
