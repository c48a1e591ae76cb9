-- Flow control (docs/guide/flow-control.md): the pauses in force. A row pauses the jobs of
-- one task identifier (scope 'task'), of one named queue ('queue'), or every job ('all', its
-- name empty). Written by WorkerUtils::pause/resume (sql/queries/flow_pause.sql,
-- flow_resume.sql), which notify 'formica:flow'; every Formica worker reads the rows
-- (sql/queries/worker/read_flow.sql) before its first fetch, on that notification and every
-- poll interval, and leaves paused jobs out of its fetch. Kept here, not in graphile-worker's
-- schema: its workers neither see nor obey it.
create table :RECORDS.pauses (
  scope text not null check (scope in ('task', 'queue', 'all')),
  name text not null check ((scope = 'all') = (name = '')),
  reason text,
  paused_by text not null,
  paused_at timestamptz not null default now(),
  primary key (scope, name)
);

-- Global concurrency caps: at most max_running jobs of a task locked at once, by anyone
-- (graphile-worker's, and a dead worker's until recovery frees them, count), across every
-- worker; with a partition, per group of the task's jobs: by the text of a payload field
-- ('field', payload->>partition_arg) or by the job key's text before the first
-- partition_arg ('key_prefix'); jobs without one share the group ''. Set by
-- WorkerUtils::set_cap/remove_cap (sql/queries/flow_cap.sql, flow_uncap.sql), which notify
-- 'formica:flow'. A worker whose tasks include a capped one fetches with lock_jobs_capped.
create table :RECORDS.caps (
  task text primary key,
  max_running integer not null check (max_running > 0),
  partition_kind text check (partition_kind in ('field', 'key_prefix')),
  partition_arg text,
  check ((partition_kind is null) = (partition_arg is null) and coalesce(partition_arg, 'x') <> ''),
  set_by text not null,
  set_at timestamptz not null default now()
);

-- The fetch of a worker some of whose tasks are capped: worker.get_jobs's parameters ($1 worker,
-- $2 tasks, $3 forbidden flags, $4 now or null, $5 limit, $6 accepted flags) plus $7 named
-- queues left out, and the caps of the tasks fetched ($8 tasks, $9 max_running, $10 partition
-- kinds, $11 partition arguments). It first takes, in task order, a transaction-scoped
-- advisory lock per capped task, so the capped fetches of one task run one after the other
-- across the fleet; then, in a statement of its own (so its snapshot, taken once the locks
-- are held, sees every fetch committed before), counts the jobs of each capped task (and
-- partition) locked by anyone, and locks at most the room left in each, beside the first $5
-- jobs of the uncapped tasks and of each task capped as a whole; at most one job per named
-- queue, in (priority, run_at, id) order. It reads every due job of the tasks capped per
-- partition (a partition's room is known only there): its cost grows with their backlog,
-- and only their fetches pay it.
create function :RECORDS.lock_jobs_capped(
  worker_id text, task_identifiers text[], forbidden_flags text[], due_by timestamptz, max_jobs int,
  accepted_flags text[], excluded_queues text[], cap_tasks text[], cap_max int[], cap_kinds text[],
  cap_args text[]
) returns table (
  id bigint, job_queue_id integer, task_id integer, payload json, priority smallint, run_at timestamptz,
  attempts smallint, max_attempts smallint, last_error text, created_at timestamptz,
  updated_at timestamptz, key text, locked_at timestamptz, locked_by text, revision integer,
  flags jsonb, is_available boolean
) language plpgsql volatile as $$
#variable_conflict use_column
declare
  capped_task text;
begin
  foreach capped_task in array (select coalesce(array_agg(t order by t), '{}') from unnest(cap_tasks) as t) loop
    perform pg_advisory_xact_lock(hashtextextended(':RECORDS.caps.' || capped_task, 0));
  end loop;
  return query
  with caps as (
    select tasks.id as task_id, c.max_running, c.kind, c.arg
    from unnest(cap_tasks, cap_max, cap_kinds, cap_args) as c(task, max_running, kind, arg)
    inner join :SCHEMA._private_tasks as tasks on tasks.identifier = c.task
  ),
  free_queues as (
    select job_queues.id from :SCHEMA._private_job_queues as job_queues
    where job_queues.is_available = true and job_queues.queue_name <> all(excluded_queues)
    for update skip locked
  ),
  plain as (
    select jobs.id, jobs.job_queue_id, jobs.priority, jobs.run_at, jobs.task_id, '' as part
    from :SCHEMA._private_jobs as jobs
    where jobs.is_available = true
      and jobs.run_at <= coalesce(due_by, now())
      and jobs.task_id = any(array(
        select tasks.id from :SCHEMA._private_tasks as tasks
        where tasks.identifier = any(task_identifiers) and tasks.identifier <> all(cap_tasks)))
      and (jobs.job_queue_id is null or jobs.job_queue_id in (select free_queues.id from free_queues))
      and (jobs.flags ?| forbidden_flags) is not true
      and (cardinality(accepted_flags) = 0 or (jobs.flags ?| accepted_flags) is true)
    order by jobs.priority asc, jobs.run_at asc
    limit max_jobs
  ),
  whole as (
    -- A task capped as a whole: its first $5 jobs, as the plain fetch walks them.
    select first.* from caps cross join lateral (
      select jobs.id, jobs.job_queue_id, jobs.priority, jobs.run_at, jobs.task_id, '' as part
      from :SCHEMA._private_jobs as jobs
      where jobs.task_id = caps.task_id
        and jobs.is_available = true
        and jobs.run_at <= coalesce(due_by, now())
        and (jobs.job_queue_id is null or jobs.job_queue_id in (select free_queues.id from free_queues))
        and (jobs.flags ?| forbidden_flags) is not true
        and (cardinality(accepted_flags) = 0 or (jobs.flags ?| accepted_flags) is true)
      order by jobs.priority asc, jobs.run_at asc
      limit max_jobs
    ) as first
    where caps.kind is null
  ),
  partitioned as (
    -- A task capped per partition: every due job (a partition's room is known only here).
    select jobs.id, jobs.job_queue_id, jobs.priority, jobs.run_at, jobs.task_id,
      coalesce(case caps.kind when 'field' then jobs.payload ->> caps.arg
        when 'key_prefix' then split_part(jobs.key, caps.arg, 1) end, '') as part
    from :SCHEMA._private_jobs as jobs
    inner join caps on caps.task_id = jobs.task_id
    where caps.kind is not null
      and jobs.is_available = true
      and jobs.run_at <= coalesce(due_by, now())
      and (jobs.job_queue_id is null or jobs.job_queue_id in (select free_queues.id from free_queues))
      and (jobs.flags ?| forbidden_flags) is not true
      and (cardinality(accepted_flags) = 0 or (jobs.flags ?| accepted_flags) is true)
  ),
  candidates as (
    select * from plain union all select * from whole union all select * from partitioned
  ),
  firsts as (
    -- A queue's first candidate only.
    select candidates.*, row_number() over (
      partition by candidates.job_queue_id order by candidates.priority, candidates.run_at, candidates.id) as nth
    from candidates
  ),
  ranked as (
    select firsts.*, row_number() over (
      partition by firsts.task_id, firsts.part order by firsts.priority, firsts.run_at, firsts.id) as in_part
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
  chosen as (
    select ranked.id from ranked
    left join caps on caps.task_id = ranked.task_id
    left join running on running.task_id = ranked.task_id and running.part = ranked.part
    where caps.task_id is null or ranked.in_part <= caps.max_running - coalesce(running.n, 0)
    order by ranked.priority, ranked.run_at, ranked.id
    limit max_jobs
  ),
  claimed as (
    -- Locked by someone else since this statement's snapshot: left out.
    select jobs.ctid, jobs.job_queue_id from :SCHEMA._private_jobs as jobs
    where jobs.id in (select chosen.id from chosen) and jobs.is_available = true
    for update skip locked
  ),
  locked_queues as (
    update :SCHEMA._private_job_queues as job_queues
    set locked_by = worker_id, locked_at = coalesce(due_by, now())
    from claimed
    where job_queues.id = claimed.job_queue_id
  )
  update :SCHEMA._private_jobs as jobs
  set attempts = jobs.attempts + 1, locked_by = worker_id, locked_at = coalesce(due_by, now())
  where jobs.ctid = any(array(select claimed.ctid from claimed))
  returning jobs.id, jobs.job_queue_id, jobs.task_id, jobs.payload, jobs.priority, jobs.run_at,
    jobs.attempts, jobs.max_attempts, jobs.last_error, jobs.created_at, jobs.updated_at, jobs.key,
    jobs.locked_at, jobs.locked_by, jobs.revision, jobs.flags, jobs.is_available;
end
$$;
