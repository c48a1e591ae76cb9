-- Several controls on one task, and fairness between a task's tenants
-- (docs/guide/flow-control.md, docs/guide/fairness.md).
--
-- A task may have one cap and one rate limit per partition ("at most 20 at once, and 1 per
-- customer, and 100 a minute per customer"): a cap's or limit's key becomes its task and
-- partition (an expression index, so that the whole task's, with null partition columns,
-- is one too). WorkerUtils::set_control replaces the control of the same task, kind and
-- partition; remove_control lifts it.
alter table :RECORDS.caps drop constraint caps_pkey;
create unique index caps_control on :RECORDS.caps
  (task, coalesce(partition_kind, ''), coalesce(partition_arg, ''));
alter table :RECORDS.rate_limits drop constraint rate_limits_pkey;
create unique index rate_limits_control on :RECORDS.rate_limits
  (task, coalesce(partition_kind, ''), coalesce(partition_arg, ''));

-- Two limits of one task count their starts apart: each start is logged under its limit's
-- partition ('field:customer', 'key_prefix::', '' for the whole task). The starts already
-- logged are the task's one limit's.
alter table :RECORDS.rate_starts add column per text not null default '';
update :RECORDS.rate_starts as starts set per = l.partition_kind || ':' || l.partition_arg
from :RECORDS.rate_limits as l
where l.task = starts.task and l.partition_kind is not null;

-- Fairness: a task's ready jobs are taken round robin across the tenants of a partition
-- (as caps partition: a payload field or a job key's prefix), each tenant weighing its
-- weight (weights: {"tenant": n}, 1 to 1000000, 1 if not named). One per task. Set by
-- WorkerUtils::set_control (sql/queries/flow_fair.sql), which notifies 'formica:flow'.
-- graphile-worker's workers neither see nor obey it.
create table :RECORDS.fair_shares (
  task text primary key,
  partition_kind text not null check (partition_kind in ('field', 'key_prefix')),
  partition_arg text not null check (partition_arg <> ''),
  weights jsonb not null default '{}' check (jsonb_typeof(weights) = 'object'),
  set_by text not null,
  set_at timestamptz not null default now()
);

-- Fairness' state, written by the controlled fetch in its transaction under the task's
-- advisory lock (stride scheduling): a tenant's pass is where its next start begins; each
-- start advances it by 1000000 / the tenant's weight (formica_core::flow::FAIR_STRIDE). A
-- task's clock is the pass at which its latest start began (starts are taken in order of
-- where they begin, so the clock only moves on): a tenant starts at the later of
-- its pass and the clock, so one back from idle (its pass behind, or its row pruned) banks
-- no credit. A tenant's row at or behind the clock says nothing and is pruned: the table
-- holds the tenants ahead of the clock, at most those started in the latest fetches.
create table :RECORDS.fair_passes (
  task text not null,
  tenant text not null,
  pass bigint not null,
  primary key (task, tenant)
);
create table :RECORDS.fair_clocks (
  task text primary key,
  pass bigint not null
);

-- The fetch of a worker some of whose tasks are controlled: lock_jobs_limited's parameters
-- ($1 to $16; a task may now appear more than once among the caps and the limits) plus the
-- fairness of the tasks fetched ($17 tasks, $18 partition kinds, $19 partition arguments,
-- $20 weights as JSON text). It takes, in task order, the per-task advisory lock of every
-- controlled task (as lock_jobs_capped and lock_jobs_limited do, so the fetches of one such
-- task, old or new, run one after the other across the fleet); prunes the task's starts
-- older than each limit's period and the passes behind each fair task's clock; then, in a
-- statement of its own (its snapshot sees every fetch committed before):
--   1. takes the first $5 due jobs of the free tasks and of each controlled task no control
--      partitions, every due job of the others (a partition's room, or a tenant, is known
--      only there), and of those each named queue's first;
--   2. refuses each job a partitioned cap or limit has no room for: each ranks the jobs of
--      its partition, by (priority, run_at, id), against max less the partition's jobs
--      locked now (a cap) or started in the period (a limit);
--   3. under fairness, gives each job left a tag, where its start begins on its tenant's
--      pass (the tenant's start, the later of its pass and the clock, plus its stride times
--      the tenant's jobs before it), and the task's jobs take the task's places (their own
--      (priority, run_at, id) keys, in order) in tag order (start-time fair queueing: a
--      tenant kept busy never falls behind the clock, so only one back from idle is moved
--      up to it): fairness decides which of the task's jobs fill its places, never how
--      many places it has;
--   4. refuses each job a whole-task cap or limit has no room for, ranked in place order;
--   5. locks the first $5 left in place order (skipping those locked since), logs each
--      lock of a limited task as a start under each of its limits, and advances each
--      fair tenant's pass by its starts, and the clock to the latest start.
-- Every control must allow a start. Two partitioned controls rank apart (step 2), so with
-- two over different partitions a job one refuses still takes a rank in the other: that
-- fetch may start fewer jobs than the room both leave (never more); the whole task's are
-- ranked among the jobs the partitioned ones allow, so "20 at once, and 1 per customer"
-- fills its 20 from 20 customers. Its cost grows with the backlog of the tasks a control
-- partitions (step 1 reads every due job of theirs), and only their fetches pay it.
create function :RECORDS.lock_jobs_controlled(
  worker_id text, task_identifiers text[], forbidden_flags text[], due_by timestamptz, max_jobs int,
  accepted_flags text[], excluded_queues text[], cap_tasks text[], cap_max int[], cap_kinds text[],
  cap_args text[], lim_tasks text[], lim_max int[], lim_period_ms int[], lim_kinds text[],
  lim_args text[], fair_tasks text[], fair_kinds text[], fair_args text[], fair_weights text[]
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
    select coalesce(array_agg(distinct t order by t), '{}') from unnest(cap_tasks || lim_tasks || fair_tasks) as t
  ) loop
    perform pg_advisory_xact_lock(hashtextextended(':RECORDS.caps.' || controlled_task, 0));
  end loop;
  fetched_at := coalesce(due_by, clock_timestamp());
  for nth in 1 .. coalesce(cardinality(lim_tasks), 0) loop
    -- A range of the index per limit: what the count below reads stays the period's rows.
    delete from :RECORDS.rate_starts as starts
    where starts.task = lim_tasks[nth]
      and starts.per = coalesce(lim_kinds[nth] || ':' || lim_args[nth], '')
      and starts.started_at <= fetched_at - lim_period_ms[nth] * interval '1 millisecond';
  end loop;
  if cardinality(fair_tasks) > 0 then
    delete from :RECORDS.fair_passes as passes
    using :RECORDS.fair_clocks as clocks
    where clocks.task = any(fair_tasks) and passes.task = clocks.task and passes.pass <= clocks.pass;
  end if;
  return query
  with bounds as (
    -- Each cap (n > 0) and rate limit (n < 0) of the tasks fetched.
    select b.n, tasks.id as task_id, b.task, b.most, b.period_ms, b.kind, b.arg,
      coalesce(b.kind || ':' || b.arg, '') as per
    from (
      select c.n, c.task, c.most, null::int as period_ms, c.kind, c.arg
      from unnest(cap_tasks, cap_max, cap_kinds, cap_args) with ordinality as c(task, most, kind, arg, n)
      union all
      select -l.n, l.task, l.most, l.period_ms, l.kind, l.arg
      from unnest(lim_tasks, lim_max, lim_period_ms, lim_kinds, lim_args)
        with ordinality as l(task, most, period_ms, kind, arg, n)
    ) as b
    inner join :SCHEMA._private_tasks as tasks on tasks.identifier = b.task
  ),
  fairness as (
    select tasks.id as task_id, f.task, f.kind, f.arg, coalesce(f.weights, '{}')::jsonb as weights,
      coalesce((select clocks.pass from :RECORDS.fair_clocks as clocks where clocks.task = f.task), 0) as clock
    from unnest(fair_tasks, fair_kinds, fair_args, fair_weights) as f(task, kind, arg, weights)
    inner join :SCHEMA._private_tasks as tasks on tasks.identifier = f.task
  ),
  controlled as (
    -- Each controlled task, read as a whole (its first $5 jobs) unless a control partitions
    -- it. Built from the controls alone: a plan estimated from the tasks table's size would
    -- cost enough to be JIT-compiled at every fetch.
    select c.task_id, bool_and(c.kind is null) as whole
    from (select bounds.task_id, bounds.kind from bounds
      union all select fairness.task_id, fairness.kind from fairness) as c
    group by c.task_id
  ),
  free_queues as (
    select job_queues.id from :SCHEMA._private_job_queues as job_queues
    where job_queues.is_available = true and job_queues.queue_name <> all(excluded_queues)
    for update skip locked
  ),
  plain as (
    select jobs.id, jobs.job_queue_id, jobs.priority, jobs.run_at, jobs.task_id, jobs.payload, jobs.key,
      null::text as tenant
    from :SCHEMA._private_jobs as jobs
    where jobs.is_available = true
      and jobs.run_at <= coalesce(due_by, now())
      and jobs.task_id = any(array(
        select tasks.id from :SCHEMA._private_tasks as tasks
        where tasks.identifier = any(task_identifiers) and tasks.identifier <> all(cap_tasks)
          and tasks.identifier <> all(lim_tasks) and tasks.identifier <> all(fair_tasks)))
      -- Decided once, before the scan: no free task, no walk of the index.
      and exists (select from unnest(task_identifiers) as t
        where t <> all(cap_tasks) and t <> all(lim_tasks) and t <> all(fair_tasks))
      and (jobs.job_queue_id is null or jobs.job_queue_id in (select free_queues.id from free_queues))
      and (jobs.flags ?| forbidden_flags) is not true
      and (cardinality(accepted_flags) = 0 or (jobs.flags ?| accepted_flags) is true)
    order by jobs.priority asc, jobs.run_at asc
    limit max_jobs
  ),
  whole as (
    -- A task no control partitions: its first $5 jobs, as the plain fetch walks them.
    select first.* from controlled cross join lateral (
      select jobs.id, jobs.job_queue_id, jobs.priority, jobs.run_at, jobs.task_id, jobs.payload, jobs.key,
        null::text as tenant
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
    -- A task a cap or limit partitions, and no fairness: every due job.
    select jobs.id, jobs.job_queue_id, jobs.priority, jobs.run_at, jobs.task_id, jobs.payload, jobs.key,
      null::text as tenant
    from :SCHEMA._private_jobs as jobs
    inner join controlled on controlled.task_id = jobs.task_id
    where not controlled.whole
      and jobs.task_id not in (select fairness.task_id from fairness)
      -- Decided once, before the scan: no such task, no read of the table.
      and exists (select from controlled as c where not c.whole
        and c.task_id not in (select fairness.task_id from fairness))
      and jobs.is_available = true
      and jobs.run_at <= coalesce(due_by, now())
      and (jobs.job_queue_id is null or jobs.job_queue_id in (select free_queues.id from free_queues))
      and (jobs.flags ?| forbidden_flags) is not true
      and (cardinality(accepted_flags) = 0 or (jobs.flags ?| accepted_flags) is true)
  ),
  fair as (
    -- A fair task: every due job is read to find the tenants (the cost that grows with the
    -- backlog: narrow rows, sorted once), and of each tenant only its first $5 go on (read
    -- again whole by id): no fetch takes more of one tenant, so what follows reads a few
    -- rows per tenant, not the backlog. (A tenant's later job stands in for an earlier one
    -- that a named queue or a partitioned control refuses only at a later fetch.)
    select jobs.id, jobs.job_queue_id, jobs.priority, jobs.run_at, jobs.task_id, jobs.payload, jobs.key,
      coalesce(case fairness.kind when 'field' then jobs.payload ->> fairness.arg
        when 'key_prefix' then split_part(jobs.key, fairness.arg, 1) end, '') as tenant
    from :SCHEMA._private_jobs as jobs
    inner join fairness on fairness.task_id = jobs.task_id
    where jobs.id = any(array(
      select ranked.id from (
        select of_tenant.id, row_number() over (partition by of_tenant.task_id, of_tenant.tenant
          order by of_tenant.priority, of_tenant.run_at, of_tenant.id) as in_tenant
        from (
          select jobs.id, jobs.task_id, jobs.priority, jobs.run_at,
            coalesce(case fairness.kind when 'field' then jobs.payload ->> fairness.arg
              when 'key_prefix' then split_part(jobs.key, fairness.arg, 1) end, '') as tenant
          from :SCHEMA._private_jobs as jobs
          inner join fairness on fairness.task_id = jobs.task_id
          where jobs.is_available = true
            and jobs.run_at <= coalesce(due_by, now())
            and (jobs.job_queue_id is null or jobs.job_queue_id in (select free_queues.id from free_queues))
            and (jobs.flags ?| forbidden_flags) is not true
            and (cardinality(accepted_flags) = 0 or (jobs.flags ?| accepted_flags) is true)
        ) as of_tenant
      ) as ranked
      where ranked.in_tenant <= max_jobs))
  ),
  firsts as (
    -- A queue's first candidate only.
    select all_of.*, row_number() over (
      partition by all_of.job_queue_id order by all_of.priority, all_of.run_at, all_of.id) as in_queue
    from (select * from plain union all select * from whole union all select * from partitioned
      union all select * from fair) as all_of
  ),
  candidates as (
    select firsts.* from firsts where firsts.job_queue_id is null or firsts.in_queue = 1
  ),
  used as (
    -- What each cap's partitions hold now (by anyone), and each limit's started in its period.
    select bounds.n,
      coalesce(case bounds.kind when 'field' then jobs.payload ->> bounds.arg
        when 'key_prefix' then split_part(jobs.key, bounds.arg, 1) end, '') as part,
      count(*) as n_used
    from :SCHEMA._private_jobs as jobs
    inner join bounds on bounds.task_id = jobs.task_id and bounds.period_ms is null
    where jobs.locked_at is not null
    group by 1, 2
    union all
    select bounds.n, logged.part, logged.n_used from bounds cross join lateral (
      select starts.part, sum(starts.n) as n_used
      from :RECORDS.rate_starts as starts
      where starts.task = bounds.task and starts.per = bounds.per
        and starts.started_at > fetched_at - bounds.period_ms * interval '1 millisecond'
      group by starts.part
    ) as logged
    where bounds.period_ms is not null
  ),
  used_by_part as (
    -- The same, one object keyed by control and partition (a lookup a job: the CTE joined
    -- was planned as a read of every partition's row for each job, n^2 in partitions).
    select coalesce(jsonb_object_agg(used.n || ':' || used.part, used.n_used), '{}') as counts from used
  ),
  refused as (
    -- Step 2: the jobs a partitioned cap or limit has no room for.
    select ranked.id from (
      select parted.id, parted.n, parted.most, parted.part, row_number() over (
        partition by parted.n, parted.part order by parted.priority, parted.run_at, parted.id) as rank_in
      from (
        select candidates.id, candidates.priority, candidates.run_at, bounds.n, bounds.most,
          coalesce(case bounds.kind when 'field' then candidates.payload ->> bounds.arg
            when 'key_prefix' then split_part(candidates.key, bounds.arg, 1) end, '') as part
        from candidates inner join bounds on bounds.task_id = candidates.task_id and bounds.kind is not null
      ) as parted
    ) as ranked
    cross join used_by_part
    where ranked.rank_in > ranked.most - coalesce((used_by_part.counts ->> (ranked.n || ':' || ranked.part))::bigint, 0)
  ),
  tagged as (
    -- Step 3: each fair job's tenant, its tenant's start and stride, and its tag.
    select with_start.*, with_start.start + with_start.stride * (row_number() over (
        partition by with_start.task_id, with_start.tenant
        order by with_start.priority, with_start.run_at, with_start.id) - 1) as tag
    from (
      select allowed.*, greatest(passes.pass, fairness.clock) as start,
        1000000 / least(greatest(coalesce((fairness.weights ->> allowed.tenant)::bigint, 1), 1), 1000000) as stride
      from (
        select candidates.* from candidates
        -- A hashed subplan, read once (an anti-join is planned as a loop over the rows).
        where candidates.id not in (select refused.id from refused)
      ) as allowed
      left join fairness on fairness.task_id = allowed.task_id
      -- A probe of the key for each job (`limit` keeps the subquery from being flattened into
      -- a join, which was planned as a read of every pass for each job: n^2 in tenants).
      left join lateral (
        select passes.pass from :RECORDS.fair_passes as passes
        where passes.task = fairness.task and passes.tenant = allowed.tenant
        limit 1
      ) as passes on true
    ) as with_start
  ),
  positioned as (
    -- A task's n-th job in tag order takes the place of its n-th in (priority, run_at, id)
    -- order (without fairness, its own); places past $5 cannot be reached.
    select tagged.*,
      row_number() over (partition by tagged.task_id
        order by tagged.tag, tagged.priority, tagged.run_at, tagged.id) as by_tag,
      row_number() over (partition by tagged.task_id
        order by tagged.priority, tagged.run_at, tagged.id) as by_key
    from tagged
  ),
  places as materialized (
    -- Each task's first $5 places, in order (arrays: a join of the rows with themselves is
    -- planned as a loop over both). Materialized: inlined, it was aggregated again for each
    -- job it placed (n^2: 1.9 s for a fetch of 1,667 jobs of a capped task).
    select positioned.task_id,
      array_agg(positioned.priority order by positioned.by_key) as priorities,
      array_agg(positioned.run_at order by positioned.by_key) as run_ats,
      array_agg(positioned.id order by positioned.by_key) as ids
    from positioned where positioned.by_key <= max_jobs
    group by positioned.task_id
  ),
  placed as (
    select job.id, job.task_id, job.tenant, job.start, job.stride, job.tag,
      places.priorities[job.by_tag] as place_priority, places.run_ats[job.by_tag] as place_run_at,
      places.ids[job.by_tag] as place_id
    from positioned as job
    inner join places on places.task_id = job.task_id
    where job.by_tag <= max_jobs
  ),
  refused_whole as (
    -- Step 4: the jobs a whole-task cap or limit has no room for, ranked in place order.
    select ranked.id from (
      select placed.id, bounds.n, bounds.most, row_number() over (partition by bounds.n
        order by placed.place_priority, placed.place_run_at, placed.place_id) as rank_in
      from placed inner join bounds on bounds.task_id = placed.task_id and bounds.kind is null
    ) as ranked
    cross join used_by_part
    where ranked.rank_in > ranked.most - coalesce((used_by_part.counts ->> (ranked.n || ':'))::bigint, 0)
  ),
  chosen as (
    select placed.* from placed
    where placed.id not in (select refused_whole.id from refused_whole)
    order by placed.place_priority, placed.place_run_at, placed.place_id
    limit max_jobs
  ),
  claimed as (
    -- Locked by someone else since this statement's snapshot: left out.
    select jobs.ctid, jobs.job_queue_id, jobs.task_id, jobs.payload, jobs.key,
      chosen.tenant, chosen.start, chosen.stride, chosen.tag
    from :SCHEMA._private_jobs as jobs
    inner join chosen on chosen.id = jobs.id
    where jobs.is_available = true
    for update of jobs skip locked
  ),
  locked_queues as (
    update :SCHEMA._private_job_queues as job_queues
    set locked_by = worker_id, locked_at = greatest(due_by, now())
    from claimed
    where job_queues.id = claimed.job_queue_id
  ),
  logged as (
    insert into :RECORDS.rate_starts (task, per, part, started_at, n)
    select bounds.task, bounds.per,
      coalesce(case bounds.kind when 'field' then claimed.payload ->> bounds.arg
        when 'key_prefix' then split_part(claimed.key, bounds.arg, 1) end, ''),
      fetched_at, count(*)
    from claimed
    inner join bounds on bounds.task_id = claimed.task_id and bounds.period_ms is not null
    group by 1, 2, 3
  ),
  advanced as (
    insert into :RECORDS.fair_passes as passes (task, tenant, pass)
    select fairness.task, claimed.tenant, min(claimed.start) + count(*) * min(claimed.stride)
    from claimed inner join fairness on fairness.task_id = claimed.task_id
    group by fairness.task, claimed.tenant
    on conflict (task, tenant) do update set pass = excluded.pass
  ),
  clocked as (
    insert into :RECORDS.fair_clocks as clocks (task, pass)
    select fairness.task, max(claimed.tag)
    from claimed inner join fairness on fairness.task_id = claimed.task_id
    group by fairness.task
    on conflict (task) do update set pass = greatest(clocks.pass, excluded.pass)
  )
  update :SCHEMA._private_jobs as jobs
  set attempts = jobs.attempts + 1, locked_by = worker_id, locked_at = greatest(due_by, now())
  where jobs.ctid = any(array(select claimed.ctid from claimed))
  returning jobs.id, jobs.job_queue_id, jobs.task_id, jobs.payload, jobs.priority, jobs.run_at,
    jobs.attempts, jobs.max_attempts, jobs.last_error, jobs.created_at, jobs.updated_at, jobs.key,
    jobs.locked_at, jobs.locked_by, jobs.revision, jobs.flags, jobs.is_available;
end
$$;

-- The limited fetch becomes a call of the controlled one, with no fairness (as migration 14
-- made the capped one a call of it): a fix to the fetch is made once, and the workers of an
-- older Formica still running during a rollout keep theirs, with its signature and answer.
-- They know one cap and one limit per task and no fairness: what they fetch keeps within
-- what they pass, and their fetches of a task still run one after another with new ones'.
create or replace function :RECORDS.lock_jobs_limited(
  worker_id text, task_identifiers text[], forbidden_flags text[], due_by timestamptz, max_jobs int,
  accepted_flags text[], excluded_queues text[], cap_tasks text[], cap_max int[], cap_kinds text[],
  cap_args text[], lim_tasks text[], lim_max int[], lim_period_ms int[], lim_kinds text[],
  lim_args text[]
) returns table (
  id bigint, job_queue_id integer, task_id integer, payload json, priority smallint, run_at timestamptz,
  attempts smallint, max_attempts smallint, last_error text, created_at timestamptz,
  updated_at timestamptz, key text, locked_at timestamptz, locked_by text, revision integer,
  flags jsonb, is_available boolean
) language sql volatile as $$
  select * from :RECORDS.lock_jobs_controlled(worker_id, task_identifiers, forbidden_flags, due_by, max_jobs,
    accepted_flags, excluded_queues, cap_tasks, cap_max, cap_kinds, cap_args,
    lim_tasks, lim_max, lim_period_ms, lim_kinds, lim_args,
    '{}'::text[], '{}'::text[], '{}'::text[], '{}'::text[])
$$;
