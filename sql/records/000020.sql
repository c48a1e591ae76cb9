-- Priority aging (docs/guide/priority-aging.md): per task, every every_ms milliseconds a job
-- has been ready its priority number falls by step, down to best. Set by
-- WorkerUtils::set_aging/remove_aging (sql/queries/aging/). graphile-worker's schema is not
-- changed: the chore writes the jobs' own priority column, which every worker fetches by
-- (graphile-worker's too), and keeps what it needs to undo it here.
create table :RECORDS.aging (
  task text primary key,
  every_ms integer not null check (every_ms > 0),
  step smallint not null check (step > 0),
  best smallint not null,
  set_by text not null,
  set_at timestamptz not null default now(),
  -- When a pass last went through the task's jobs and had changed all it had to (null:
  -- never, or settings changed since); the next pass of the task is due a quarter of
  -- every_ms later, so a pass between finds nothing due and reads only this table.
  passed_at timestamptz
);

-- The jobs the chore changed: their own priority, and the one it set (a job whose priority
-- differs from it was changed since by someone else, whose number is its own again).
-- Forgotten once the job is gone (by the chore's next pass) or its task's aging is lifted.
create table :RECORDS.aged_jobs (
  job_id bigint primary key,
  original smallint not null,
  aged smallint not null
);

-- One pass of the aging chore: null if another pass runs (one at a time per schema, so
-- workers running it at once change each job once per step), else how many jobs it changed.
-- It goes through the jobs of the aged tasks whose last complete pass is a quarter of their
-- every_ms ago or more (a task's pass reads all its waiting jobs: the quarter bounds how
-- often, and how late a step is applied). Of their waiting jobs (not locked, attempts left, due), it sets the priority of
-- at most max_jobs, ready longest first, whose aged priority is below the one they have:
-- greatest(best, original - step * whole periods ready), never above the original. A job
-- locked by a fetch meanwhile is skipped (SKIP LOCKED, then is_available checked on the row
-- as it is). updated_at is left alone: a lock taken by a fetch that began before this pass
-- must not look older than the job's last update.
create function :RECORDS.age_priorities(max_jobs int) returns integer
language plpgsql volatile as $$
declare
  changed integer;
  due_tasks text[];
begin
  if not pg_try_advisory_xact_lock(hashtextextended(':RECORDS.aging', 0)) then
    return null;
  end if;
  select coalesce(array_agg(aging.task), '{}') into due_tasks from :RECORDS.aging as aging
  where aging.passed_at is null or aging.passed_at <= now() - aging.every_ms * interval '250 microseconds';
  if cardinality(due_tasks) = 0 then
    return 0;
  end if;
  delete from :RECORDS.aged_jobs as aged
  where aged.job_id in (
    select gone.job_id from :RECORDS.aged_jobs as gone
    where not exists (select from :SCHEMA._private_jobs as jobs where jobs.id = gone.job_id)
    limit max_jobs
  );
  with waiting as (
    select jobs.id, jobs.run_at, jobs.priority,
      case when aged.aged = jobs.priority then aged.original else jobs.priority end as original,
      aging.every_ms, aging.step, aging.best
    from :RECORDS.aging as aging
    inner join :SCHEMA._private_tasks as tasks on tasks.identifier = aging.task
      and aging.task = any(due_tasks)
    inner join :SCHEMA._private_jobs as jobs on jobs.task_id = tasks.id
    left join :RECORDS.aged_jobs as aged on aged.job_id = jobs.id
    where jobs.is_available = true
      and jobs.run_at <= now() - aging.every_ms * interval '1 millisecond'
      and jobs.priority > aging.best
  ),
  due as (
    -- date_part, not extract: a double, where extract's numeric costs a pass most of its time.
    select waiting.id, waiting.run_at, waiting.priority, waiting.original,
      least(waiting.original::bigint, greatest(waiting.best::bigint, waiting.original::bigint
        - waiting.step::bigint * floor(date_part('epoch', now() - waiting.run_at) * 1000 / waiting.every_ms)::bigint
      ))::smallint as aged
    from waiting
  ),
  chosen as (
    select jobs.id, first.original, first.aged
    from :SCHEMA._private_jobs as jobs
    inner join (
      select due.id, due.original, due.aged from due
      where due.aged < due.priority
      order by due.run_at, due.id
      limit max_jobs
    ) as first on first.id = jobs.id
    where jobs.is_available = true
    for update of jobs skip locked
  ),
  remembered as (
    insert into :RECORDS.aged_jobs (job_id, original, aged)
    select chosen.id, chosen.original, chosen.aged from chosen
    on conflict (job_id) do update set original = excluded.original, aged = excluded.aged
  ),
  raised as (
    update :SCHEMA._private_jobs as jobs set priority = chosen.aged
    from chosen where jobs.id = chosen.id
    returning jobs.id
  )
  select count(*) into changed from raised;
  -- A batch cut short leaves more due: the next pass goes on without waiting.
  if changed < max_jobs then
    update :RECORDS.aging as aging set passed_at = now() where aging.task = any(due_tasks);
  end if;
  return changed;
end
$$;
