-- Bounded queues (docs/guide/bounded-queues.md): at most max_waiting jobs of a task waiting
-- (not locked, attempts left: graphile-worker's is_available, so due or not), per partition
-- if any (by a payload field's text or the job key's text before a separator, as caps
-- group). Set by WorkerUtils::set_control with a bound (sql/queries/flow_bound.sql). Only
-- Formica's add statements read it, through make_room; graphile_worker.add_job and
-- graphile-worker's own adds do not. With wait_ms > 0 an add over the bound waits up to
-- that long for room before it is refused.
create table :RECORDS.bounds (
  task text primary key,
  max_waiting integer not null check (max_waiting > 0),
  wait_ms integer not null default 0 check (wait_ms >= 0),
  partition_kind text check (partition_kind in ('field', 'key_prefix')),
  partition_arg text,
  check ((partition_kind is null) = (partition_arg is null) and coalesce(partition_arg, 'x') <> ''),
  set_by text not null,
  set_at timestamptz not null default now()
);

-- The partition a bound of kind partition_kind over partition_arg puts a job in:
-- its payload field's text, or its key's text before the separator; '' without one.
-- Inlined where it is called.
create function :RECORDS.partition_of(partition_kind text, partition_arg text, payload json, key text)
returns text language sql immutable as $$
  select coalesce(case partition_kind when 'field' then payload ->> partition_arg
    when 'key_prefix' then split_part(key, partition_arg, 1) end, '')
$$;

-- Called by an add statement after it stored the jobs job_ids (so they count, uncommitted).
-- For each bounded (task, partition) among them, in lock order: takes a transaction-scoped
-- advisory lock of its own, so the bounded adds of one partition run one after the other
-- across connections, then counts that partition's waiting jobs in a statement of its own
-- (a snapshot taken once the lock is held sees every add committed before, and this
-- transaction's own jobs). Over the bound it waits (polling every 50 ms, lock held, so
-- later adders queue behind it) until there is room or wait_ms passed, then raises
-- SQLSTATE FMFUL with the task, partition, bound and count as JSON in DETAIL: the statement
-- fails, nothing of it is stored. Exact under READ COMMITTED, PostgreSQL's default; a
-- REPEATABLE READ transaction's snapshot predates the lock, so it is refused with FMFUL's
-- sibling FMISO rather than counting with a stale view. Returns true.
create function :RECORDS.make_room(job_ids bigint[]) returns boolean
language plpgsql volatile as $$
declare
  part record;
  waiting bigint;
  deadline timestamptz;
  last_look boolean;
begin
  for part in
    select distinct bounds.task, bounds.max_waiting, bounds.wait_ms, bounds.partition_kind,
      bounds.partition_arg, jobs.task_id,
      :RECORDS.partition_of(bounds.partition_kind, bounds.partition_arg, jobs.payload, jobs.key) as name
    from :SCHEMA._private_jobs as jobs
    inner join :SCHEMA._private_tasks as tasks on tasks.id = jobs.task_id
    inner join :RECORDS.bounds as bounds on bounds.task = tasks.identifier
    where jobs.id = any(job_ids)
    order by 1, 7
  loop
    if current_setting('transaction_isolation') <> 'read committed' then
      raise exception using errcode = 'FMISO',
        message = format('task %L is bounded: a bounded add needs a READ COMMITTED transaction, not %s',
          part.task, current_setting('transaction_isolation'));
    end if;
    -- Tasks then partitions in one order for every adder: two batches never wait on each other
    -- crosswise.
    perform pg_advisory_xact_lock(hashtextextended(':RECORDS.bounds.' || part.task || chr(31) || part.name, 0));
    deadline := clock_timestamp() + part.wait_ms * interval '1 millisecond';
    loop
      -- While waiting, knowing the bound is passed is enough; the last look counts them all
      -- for the error (under the bound both counts are the same).
      last_look := clock_timestamp() >= deadline;
      select count(*) into waiting from (
        select from :SCHEMA._private_jobs as jobs
        where jobs.task_id = part.task_id and jobs.is_available
          and (part.partition_kind is null
            or :RECORDS.partition_of(part.partition_kind, part.partition_arg, jobs.payload, jobs.key) = part.name)
        limit case when last_look then null else part.max_waiting + 1 end
      ) as counted;
      exit when waiting <= part.max_waiting;
      if last_look then
        raise exception using errcode = 'FMFUL',
          message = format('queue full: task %L%s would have %s waiting jobs, over its bound of %s; nothing was added',
            part.task, case when part.partition_kind is null then '' else format(' (partition %L)', part.name) end,
            waiting, part.max_waiting),
          detail = json_build_object('task', part.task,
            'partition', case when part.partition_kind is null then null else part.name end,
            'max', part.max_waiting, 'count', waiting)::text;
      end if;
      perform pg_sleep(least(0.05, extract(epoch from deadline - clock_timestamp())));
    end loop;
  end loop;
  return true;
end
$$;

-- Abort on replace (job_key_mode 'replace_and_abort', docs/guide/unique-jobs.md): called by
-- sql/queries/add_aborting.sql before graphile_worker.add_job replaces the key's job, in the
-- same statement. If a worker holds the job with key job_key, that run is stopped: the job
-- gives up its key, gets no attempt left, and a cancel request is recorded for its holder
-- (woken on 'formica:cancel'; the request's reason says it was replaced), exactly as
-- cancel_jobs records one. The new job must not run beside it: it goes into the running job's
-- named queue, which its worker holds locked until the run is written (completion or failure
-- release it) or its lease lapses (recovery releases it); a job without a queue is first
-- moved into a queue of its own, 'formica:replaced:<id>', locked by that same worker. A key
-- whose job waits in a locked queue (behind such a run) keeps that queue. Returns the queue
-- the new job takes: queue_name, unless one of the above holds.
create function :RECORDS.hold_for_replace(job_key text, queue_name text) returns text
language plpgsql volatile as $$
#variable_conflict use_variable
declare
  old record;
  held_queue text;
begin
  if job_key is null then
    return queue_name;
  end if;
  select jobs.id, jobs.locked_at, jobs.locked_by, jobs.job_queue_id into old
  from :SCHEMA._private_jobs as jobs where jobs.key = job_key
  for update;
  if not found then
    return queue_name;
  end if;
  if old.locked_at is null then
    select job_queues.queue_name into held_queue from :SCHEMA._private_job_queues as job_queues
    where job_queues.id = old.job_queue_id and job_queues.locked_at is not null;
    return coalesce(held_queue, queue_name);
  end if;
  if old.job_queue_id is null then
    insert into :SCHEMA._private_job_queues as job_queues (queue_name, locked_at, locked_by)
    values ('formica:replaced:' || old.id, old.locked_at, old.locked_by)
    on conflict on constraint job_queues_queue_name_key
      do update set locked_at = excluded.locked_at, locked_by = excluded.locked_by
    returning job_queues.id, job_queues.queue_name into old.job_queue_id, held_queue;
  else
    select job_queues.queue_name into held_queue from :SCHEMA._private_job_queues as job_queues
    where job_queues.id = old.job_queue_id;
  end if;
  update :SCHEMA._private_jobs as jobs
  set key = null, attempts = jobs.max_attempts, job_queue_id = old.job_queue_id, updated_at = now()
  where jobs.id = old.id;
  insert into :RECORDS.cancel_requests (job_id, reason)
  values (old.id, 'replaced: job key ' || job_key || ' was added again')
  on conflict (job_id) do nothing;
  perform pg_notify('formica:cancel', '');
  return held_queue;
end
$$;
