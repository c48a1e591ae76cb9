-- Workflow jobs that wait for a signal or a timer (docs/guide/workflows.md, rules 8 and 9 of
-- core/src/workflow.rs). A job waits for a named signal besides its dependencies: sent by
-- signal_workflow (WorkerUtils, the CLI, the dashboard, or an application's own trigger), it
-- releases the job in the transaction that records it, or the settling that ends its last
-- dependency does. A timer delays a released job's run_at. Jobs without either have no row
-- here: what they pay is one probe of this table's key when they are released.

create table :RECORDS.workflow_waits (
  job bigint primary key references :RECORDS.workflow_jobs (id) on delete cascade,
  workflow_id bigint not null references :RECORDS.workflows (id) on delete cascade,
  -- The timer: a released job runs this long after its release, not before.
  delay interval check (delay >= interval '0'),
  -- The signal it waits for (null: none), and how long once its dependencies have all
  -- settled (null: for ever), then released ('release') or cancelled ('cancel').
  signal text check (signal <> ''),
  signal_timeout interval check (signal_timeout >= interval '0'),
  on_signal_timeout text not null default 'cancel' check (on_signal_timeout in ('cancel', 'release')),
  -- Set when it waits for its signal only (its dependencies settled) and has a timeout.
  signal_deadline timestamptz,
  -- The signal's arrival and payload (the first: a second send changes nothing).
  signalled_at timestamptz,
  signal_payload jsonb,
  -- Its timeout passed before the signal came.
  timed_out_at timestamptz
);
-- Who a signal reaches.
create index workflow_waits_signal on :RECORDS.workflow_waits (workflow_id, signal)
  where signal is not null;
-- What the resolver's pass times out.
create index workflow_waits_deadline on :RECORDS.workflow_waits (signal_deadline)
  where signalled_at is null and timed_out_at is null;

-- The waits of the workflow `added`'s jobs, from add_workflow's spec: each job's "delay"
-- (seconds), and "signal" {"name", "timeout" (seconds or null), "on_timeout"}; the jobs are
-- named `prefix` and their name in `spec` (jobs added at runtime are named after their adder),
-- and those with waits already (added before) are left as they are. PL/pgSQL, so its statement
-- is planned once a session (an SQL function's body is planned at every call: every add).
create function :RECORDS.add_workflow_waits(added bigint, spec json, prefix text default '')
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

-- Of the waiting jobs `ids` (locked by the caller) whose dependencies have all settled, those
-- to release now: not those that still wait for their signal, which start their timeout
-- instead. Those released get their timer's run_at and their signal under "signal" in
-- their payload ({"name", "payload", "timed_out"}). release_workflow_jobs calls it first.
-- Generic plans, as step 22's settling functions: a release calls it, and planning its
-- statements anew at each call would cost more than running them.
create function :RECORDS.workflow_jobs_ready(ids bigint[]) returns bigint[] language plpgsql
set search_path = pg_catalog, pg_temp set plan_cache_mode = force_generic_plan set enable_seqscan = off as $$
#variable_conflict use_column
declare
  held bigint[];
begin
  -- The common case, a workflow without signals or timers: one probe of the key.
  if cardinality(ids) = 0 or not exists (select from :RECORDS.workflow_waits as waits where waits.job = any(ids)) then
    return ids;
  end if;
  with waiting as (
    update :RECORDS.workflow_waits as waits
    set signal_deadline = coalesce(waits.signal_deadline, clock_timestamp() + waits.signal_timeout)
    where waits.job = any(ids) and waits.signal is not null and waits.signalled_at is null
      and waits.timed_out_at is null
    returning waits.job
  )
  select coalesce(array_agg(waiting.job), '{}') into held from waiting;
  update :RECORDS.workflow_jobs as jobs
  set run_at = case when waits.delay is null then jobs.run_at
      else greatest(jobs.run_at, clock_timestamp() + waits.delay) end,
    payload = case when waits.signal is null then jobs.payload
      else (jobs.payload::jsonb || jsonb_build_object('signal', jsonb_build_object('name', waits.signal,
        'payload', waits.signal_payload, 'timed_out', waits.timed_out_at is not null)))::json end
  from :RECORDS.workflow_waits as waits
  where waits.job = jobs.id and jobs.id = any(ids) and jobs.id <> all(held) and jobs.state = 'waiting';
  return array(select id from unnest(ids) as id where id <> all(held));
end
$$;

-- Send the signal `signal_name` to the workflow `target` with `payload` (may be null). Each
-- waiting job that waits for it and has not got it gets it, and is released in this
-- transaction if its dependencies have all settled (the others when they do). Row:
-- 'received' (with the jobs that got it and those released), 'duplicate' (every job that
-- waits or waited for it already got it: nothing changes), 'not_waiting' (no job waits for
-- it: none was added waiting for it, or it was cancelled or timed out) or 'missing' (no such
-- workflow). Usable from an application's trigger.
create function :RECORDS.signal_workflow(target bigint, signal_name text, payload jsonb default null)
returns table (outcome text, received bigint[], released bigint[]) language plpgsql
set search_path = pg_catalog, pg_temp set enable_seqscan = off as $$
#variable_conflict use_column
declare
  locked bigint[];
  got bigint[];
  ready bigint[];
begin
  perform from :RECORDS.workflows as workflows where workflows.id = target;
  if not found then
    return query select 'missing', '{}'::bigint[], '{}'::bigint[];
    return;
  end if;
  -- In id order, as the settling locks them: a completion and a signal reaching one job
  -- wait for each other, and whichever comes second sees the first's work.
  locked := array(
    select jobs.id from :RECORDS.workflow_jobs as jobs
    where jobs.id = any(array(select waits.job from :RECORDS.workflow_waits as waits
        where waits.workflow_id = target and waits.signal = signal_name))
      and jobs.state = 'waiting'
    order by jobs.id
    for update);
  with marked as (
    update :RECORDS.workflow_waits as waits
    -- $3: the name payload is workflow_jobs's column here.
    set signalled_at = clock_timestamp(), signal_payload = $3
    from :RECORDS.workflow_jobs as jobs
    where waits.job = any(locked) and jobs.id = waits.job and jobs.state = 'waiting'
      and waits.signalled_at is null and waits.timed_out_at is null
    returning waits.job, jobs.pending
  )
  select coalesce(array_agg(marked.job order by marked.job), '{}'),
    coalesce(array_agg(marked.job order by marked.job) filter (where marked.pending = 0), '{}')
  into got, ready
  from marked;
  if cardinality(got) = 0 then
    return query select case when exists (select from :RECORDS.workflow_waits as waits
        where waits.workflow_id = target and waits.signal = signal_name and waits.signalled_at is not null)
      then 'duplicate' else 'not_waiting' end, '{}'::bigint[], '{}'::bigint[];
    return;
  end if;
  perform :RECORDS.release_workflow_jobs(ready);
  return query select 'received', got, array(select jobs.id from :RECORDS.workflow_jobs as jobs
    where jobs.id = any(ready) and jobs.state = 'released' order by jobs.id);
end
$$;

-- The resolver's part for signals: each job whose signal's deadline passed is released
-- without it or cancelled (settling what waits for it), as it says. Run within
-- resolve_workflows's pass (sql/queries/workflows/resolve.sql). Returns the jobs timed out.
create function :RECORDS.time_out_workflow_signals() returns bigint language plpgsql
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
  end if;
  return cardinality(releasing) + cardinality(cancelling);
end
$$;

-- retry_workflow of records step 11, which the waits change in one place marked "Records
-- step 23". release_workflow_jobs and add_workflow take the waits in records step 24, which
-- replaces both for sub-workflows too: until it has run no workflow has a wait (only a worker
-- of this version adds one, after migrating every step), so step 22's and step 11's serve.

-- Run the workflow `retried`'s failed jobs again (rule 6 of core/src/workflow.rs): one whose
-- graphile_worker job is still there, out of attempts and not locked, is rescheduled with its
-- attempts at 0; the others are added anew (a callback's batch counted again). The jobs
-- cancelled because of a dependency (never released) wait again, and every waiting job
-- counts what it waits for afresh. Rows: the workflow's state before ('missing' if there is
-- none; a cancelled one is left as it is), and the jobs run again and put back to wait.
create or replace function :RECORDS.retry_workflow(retried bigint)
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
        -- Records step 23: one its signal's timeout cancelled stays, as a cancel does.
        and not exists (select from :RECORDS.workflow_waits as waits
          where waits.job = jobs.id and waits.timed_out_at is not null)
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
