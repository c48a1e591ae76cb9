-- Rate limits (docs/guide/flow-control.md): at most max_starts jobs of a task locked in any
-- period_ms milliseconds of the database clock, across every Formica worker; with a
-- partition, per group of the task's jobs, as caps group them (000006.sql). Set by
-- WorkerUtils::set_rate_limit/remove_rate_limit (sql/queries/flow_limit.sql,
-- flow_unlimit.sql), which notify 'formica:flow'. A worker whose tasks include a limited one
-- fetches with lock_jobs_limited. graphile-worker's workers neither see nor obey them.
create table :RECORDS.rate_limits (
  task text primary key,
  max_starts integer not null check (max_starts > 0),
  period_ms integer not null check (period_ms > 0),
  partition_kind text check (partition_kind in ('field', 'key_prefix')),
  partition_arg text,
  check ((partition_kind is null) = (partition_arg is null) and coalesce(partition_arg, 'x') <> ''),
  set_by text not null,
  set_at timestamptz not null default now()
);

-- The starts of limited tasks within their period: one row per fetch and partition, the
-- jobs lock_jobs_limited locked (n) at that time, written in the fetch's transaction (a row
-- per fetch, not per job, keeps what a fetch counts and writes small), pruned by the next
-- limited fetch of the task once older than the period. Unlogged state would lose the log
-- on a crash and let a burst through: it is a plain table.
create table :RECORDS.rate_starts (
  task text not null,
  part text not null,
  started_at timestamptz not null,
  n integer not null check (n > 0)
);
create index rate_starts_task on :RECORDS.rate_starts (task, started_at);

-- The fetch of a worker some of whose tasks are rate limited (and perhaps capped):
-- lock_jobs_capped's parameters ($1 to $11) plus the limits of the tasks fetched ($12 tasks,
-- $13 max_starts, $14 period_ms, $15 partition kinds, $16 partition arguments). It takes, in
-- task order, the same per-task advisory lock as the capped fetch for every capped or limited
-- task, so the fetches of one such task run one after the other across the fleet; reads the
-- clock once the locks are held (`due_by` if given, else clock_timestamp(): the lock wait is
-- not counted as the past); prunes the task's starts older than its period; then, in a
-- statement of its own (its snapshot sees every fetch committed before), locks of each
-- limited task (and partition) at most max_starts less its starts in the last period_ms, and
-- of each capped one at most the room its cap leaves, logging each lock of a limited task as
-- a start at that time. So the starts logged in any period of a task's fetches' clock number
-- at most max_starts: the fetch that logged the last of them counted all the others.
create function :RECORDS.lock_jobs_limited(
  worker_id text, task_identifiers text[], forbidden_flags text[], due_by timestamptz, max_jobs int,
  accepted_flags text[], excluded_queues text[], cap_tasks text[], cap_max int[], cap_kinds text[],
  cap_args text[], lim_tasks text[], lim_max int[], lim_period_ms int[], lim_kinds text[],
  lim_args text[]
) returns table (
  id bigint, job_queue_id integer, task_id integer, payload json, priority smallint, run_at timestamptz,
  attempts smallint, max_attempts smallint, last_error text, created_at timestamptz,
  updated_at timestamptz, key text, locked_at timestamptz, locked_by text, revision integer,
  flags jsonb, is_available boolean
) language plpgsql volatile as $$
#variable_conflict use_column
declare
  controlled_task text;
  fetched_at timestamptz;
  nth int;
begin
  foreach controlled_task in array (
    select coalesce(array_agg(distinct t order by t), '{}') from unnest(cap_tasks || lim_tasks) as t
  ) loop
    perform pg_advisory_xact_lock(hashtextextended(':RECORDS.caps.' || controlled_task, 0));
  end loop;
  fetched_at := coalesce(due_by, clock_timestamp());
  for nth in 1 .. coalesce(cardinality(lim_tasks), 0) loop
    -- A range of the index per task: what the count below reads stays the period's rows.
    delete from :RECORDS.rate_starts as starts
    where starts.task = lim_tasks[nth]
      and starts.started_at <= fetched_at - lim_period_ms[nth] * interval '1 millisecond';
  end loop;
  return query
  with caps as (
    select tasks.id as task_id, c.max_running, c.kind, c.arg
    from unnest(cap_tasks, cap_max, cap_kinds, cap_args) as c(task, max_running, kind, arg)
    inner join :SCHEMA._private_tasks as tasks on tasks.identifier = c.task
  ),
  limits as (
    select tasks.id as task_id, l.task, l.max_starts, l.period_ms, l.kind, l.arg
    from unnest(lim_tasks, lim_max, lim_period_ms, lim_kinds, lim_args) as l(task, max_starts, period_ms, kind, arg)
    inner join :SCHEMA._private_tasks as tasks on tasks.identifier = l.task
  ),
  controlled as (
    -- Each capped or limited task, read as a whole (its first $5 jobs) unless a control
    -- partitions it (then every due job: a partition's room is known only there).
    -- Built from the controls alone: a plan estimated from the tasks table's size would
    -- cost enough to be JIT-compiled at every fetch.
    select c.task_id, bool_and(c.kind is null) as whole
    from (select caps.task_id, caps.kind from caps union all select limits.task_id, limits.kind from limits) as c
    group by c.task_id
  ),
  free_queues as (
    select job_queues.id from :SCHEMA._private_job_queues as job_queues
    where job_queues.is_available = true and job_queues.queue_name <> all(excluded_queues)
    for update skip locked
  ),
  plain as (
    select jobs.id, jobs.job_queue_id, jobs.priority, jobs.run_at, jobs.task_id, jobs.payload, jobs.key
    from :SCHEMA._private_jobs as jobs
    where jobs.is_available = true
      and jobs.run_at <= coalesce(due_by, now())
      and jobs.task_id = any(array(
        select tasks.id from :SCHEMA._private_tasks as tasks
        where tasks.identifier = any(task_identifiers) and tasks.identifier <> all(cap_tasks)
          and tasks.identifier <> all(lim_tasks)))
      and (jobs.job_queue_id is null or jobs.job_queue_id in (select free_queues.id from free_queues))
      and (jobs.flags ?| forbidden_flags) is not true
      and (cardinality(accepted_flags) = 0 or (jobs.flags ?| accepted_flags) is true)
    order by jobs.priority asc, jobs.run_at asc
    limit max_jobs
  ),
  whole as (
    -- A task no control partitions: its first $5 jobs, as the plain fetch walks them.
    select first.* from controlled cross join lateral (
      select jobs.id, jobs.job_queue_id, jobs.priority, jobs.run_at, jobs.task_id, jobs.payload, jobs.key
      from :SCHEMA._private_jobs as jobs
      where jobs.task_id = controlled.task_id
        and jobs.is_available = true
        and jobs.run_at <= coalesce(due_by, now())
        and (jobs.job_queue_id is null or jobs.job_queue_id in (select free_queues.id from free_queues))
        and (jobs.flags ?| forbidden_flags) is not true
        and (cardinality(accepted_flags) = 0 or (jobs.flags ?| accepted_flags) is true)
      order by jobs.priority asc, jobs.run_at asc
      limit max_jobs
    ) as first
    where controlled.whole
  ),
  partitioned as (
    -- A task a control partitions: every due job (a partition's room is known only here).
    select jobs.id, jobs.job_queue_id, jobs.priority, jobs.run_at, jobs.task_id, jobs.payload, jobs.key
    from :SCHEMA._private_jobs as jobs
    inner join controlled on controlled.task_id = jobs.task_id
    where not controlled.whole
      and jobs.is_available = true
      and jobs.run_at <= coalesce(due_by, now())
      and (jobs.job_queue_id is null or jobs.job_queue_id in (select free_queues.id from free_queues))
      and (jobs.flags ?| forbidden_flags) is not true
      and (cardinality(accepted_flags) = 0 or (jobs.flags ?| accepted_flags) is true)
  ),
  candidates as (
    select all_of.*,
      coalesce(case caps.kind when 'field' then all_of.payload ->> caps.arg
        when 'key_prefix' then split_part(all_of.key, caps.arg, 1) end, '') as cap_part,
      coalesce(case limits.kind when 'field' then all_of.payload ->> limits.arg
        when 'key_prefix' then split_part(all_of.key, limits.arg, 1) end, '') as rate_part
    from (select * from plain union all select * from whole union all select * from partitioned) as all_of
    left join caps on caps.task_id = all_of.task_id
    left join limits on limits.task_id = all_of.task_id
  ),
  firsts as (
    -- A queue's first candidate only.
    select candidates.*, row_number() over (
      partition by candidates.job_queue_id order by candidates.priority, candidates.run_at, candidates.id) as nth
    from candidates
  ),
  ranked as (
    select firsts.*,
      row_number() over (
        partition by firsts.task_id, firsts.cap_part order by firsts.priority, firsts.run_at, firsts.id) as in_cap,
      row_number() over (
        partition by firsts.task_id, firsts.rate_part order by firsts.priority, firsts.run_at, firsts.id) as in_rate
    from firsts
    where firsts.job_queue_id is null or firsts.nth = 1
  ),
  running as (
    select jobs.task_id,
      coalesce(case caps.kind when 'field' then jobs.payload ->> caps.arg
        when 'key_prefix' then split_part(jobs.key, caps.arg, 1) end, '') as part,
      count(*) as n
    from :SCHEMA._private_jobs as jobs
    inner join caps on caps.task_id = jobs.task_id
    where jobs.locked_at is not null
    group by 1, 2
  ),
  started as (
    select limits.task_id, logged.part, logged.n from limits cross join lateral (
      select starts.part, sum(starts.n) as n
      from :RECORDS.rate_starts as starts
      where starts.task = limits.task
        and starts.started_at > fetched_at - limits.period_ms * interval '1 millisecond'
      group by starts.part
    ) as logged
  ),
  chosen as (
    select ranked.id, limits.task as limited_task, ranked.rate_part from ranked
    left join caps on caps.task_id = ranked.task_id
    left join running on running.task_id = ranked.task_id and running.part = ranked.cap_part
    left join limits on limits.task_id = ranked.task_id
    left join started on started.task_id = ranked.task_id and started.part = ranked.rate_part
    where (caps.task_id is null or ranked.in_cap <= caps.max_running - coalesce(running.n, 0))
      and (limits.task_id is null or ranked.in_rate <= limits.max_starts - coalesce(started.n, 0))
    order by ranked.priority, ranked.run_at, ranked.id
    limit max_jobs
  ),
  claimed as (
    -- Locked by someone else since this statement's snapshot: left out. Carries what the
    -- log needs, so logging joins nothing (a join of two CTEs is a nested loop here).
    select jobs.ctid, jobs.job_queue_id, chosen.limited_task, chosen.rate_part
    from :SCHEMA._private_jobs as jobs
    inner join chosen on chosen.id = jobs.id
    where jobs.is_available = true
    for update of jobs skip locked
  ),
  locked_queues as (
    update :SCHEMA._private_job_queues as job_queues
    set locked_by = worker_id, locked_at = coalesce(due_by, now())
    from claimed
    where job_queues.id = claimed.job_queue_id
  ),
  logged as (
    insert into :RECORDS.rate_starts (task, part, started_at, n)
    select claimed.limited_task, claimed.rate_part, fetched_at, count(*)
    from claimed
    where claimed.limited_task is not null
    group by 1, 2
  )
  update :SCHEMA._private_jobs as jobs
  set attempts = jobs.attempts + 1, locked_by = worker_id, locked_at = coalesce(due_by, now())
  where jobs.ctid = any(array(select claimed.ctid from claimed))
  returning jobs.id, jobs.job_queue_id, jobs.task_id, jobs.payload, jobs.priority, jobs.run_at,
    jobs.attempts, jobs.max_attempts, jobs.last_error, jobs.created_at, jobs.updated_at, jobs.key,
    jobs.locked_at, jobs.locked_by, jobs.revision, jobs.flags, jobs.is_available;
end
$$;
