-- Job history (docs/guide/history.md): one row for each run of a job that ended for good,
-- written by the statement that ends it (sql/queries/worker/history_complete.sql and
-- history_fail.sql) with the worker's option `history` on.
--
-- Partitioned by outcome, then by day of `finished_at` (UTC), so that each outcome keeps
-- its own retention and the pruner (`prune_history` below) drops whole days: no delete, no
-- bloat, no vacuum behind it. A default partition per outcome takes rows whose day has no
-- partition yet (the pruner creates them two days ahead), so an insert never fails.
create table :RECORDS.job_history (
  job_id bigint not null,
  task_identifier text not null,
  queue_name text,
  key text,
  payload json not null,
  -- The attempts the job made, this one included.
  attempts smallint not null,
  max_attempts smallint not null,
  outcome text not null check (outcome in ('completed', 'failed', 'cancelled')),
  -- The failure that ended the job; for a completed one, the last failed attempt's, if any.
  last_error text,
  added_at timestamptz not null,
  -- When the last attempt started (graphile-worker's table keeps no first start).
  started_at timestamptz,
  finished_at timestamptz not null,
  worker_id text,
  -- What the handler returned (a completed job of a task with output), else null.
  output json
) partition by list (outcome);

create table :RECORDS.job_history_completed partition of :RECORDS.job_history
  for values in ('completed') partition by range (finished_at);
create table :RECORDS.job_history_failed partition of :RECORDS.job_history
  for values in ('failed') partition by range (finished_at);
create table :RECORDS.job_history_cancelled partition of :RECORDS.job_history
  for values in ('cancelled') partition by range (finished_at);
create table :RECORDS.job_history_completed_default partition of :RECORDS.job_history_completed default;
create table :RECORDS.job_history_failed_default partition of :RECORDS.job_history_failed default;
create table :RECORDS.job_history_cancelled_default partition of :RECORDS.job_history_cancelled default;

-- `job_outcome` and `wait_for_job` look a job up, the history page lists newest ids first;
-- its charts read by time, where a BRIN index is enough (rows come in finished_at order)
-- and costs the completions next to nothing, where a B-tree would cost each row an insert.
create index job_history_job_id on :RECORDS.job_history (job_id);
create index job_history_finished_at on :RECORDS.job_history using brin (finished_at);

-- Who waits for which job (`WorkerUtils::wait_for_job`): the statement that writes history
-- notifies `formica:finished` only when a waited job is among its rows, so a drain nobody
-- waits on pays one look at this empty table a statement. `pid`: the waiting backend, so the
-- pruner forgets the rows of waiters that died.
create table :RECORDS.job_waiters (
  job_id bigint not null,
  pid integer not null default pg_backend_pid(),
  since timestamptz not null default now()
);
create index job_waiters_job_id on :RECORDS.job_waiters (job_id);

create function :RECORDS.notify_job_waiters() returns trigger language plpgsql as $$
declare
  ids text;
begin
  if exists (select from :RECORDS.job_waiters) then
    select string_agg(distinct finished.job_id::text, ',') into ids
    from finished
    where finished.job_id in (select job_waiters.job_id from :RECORDS.job_waiters);
    if ids is not null then
      perform pg_notify('formica:finished', ids);
    end if;
  end if;
  return null;
end
$$;

create trigger notify_job_waiters after insert on :RECORDS.job_history
  referencing new table as finished
  for each statement execute function :RECORDS.notify_job_waiters();

-- One pass of the pruner, as of `at`: for each outcome, create the day partitions from the
-- day before `at` to two days after, drop the days that ended more than its retention
-- before `at`, and delete up to `batch` rows older than that from its default partition
-- (rows that came before their day's partition). A null retention keeps that outcome for
-- ever. DDL waits at most `lock_wait` for its lock (taken briefly, it would hold up
-- completions while waiting), and is tried again next pass if it could not get it.
-- Returns the partitions dropped and the rows deleted. Runs as its owner (the migrating
-- role, which owns the tables), so a worker role with DML rights alone prunes (the
-- deploying guide's grants): it can create and drop nothing else.
create function :RECORDS.prune_history(
  at timestamptz, completed interval, failed interval, cancelled interval,
  batch integer, lock_wait text
) returns table (dropped integer, deleted bigint) language plpgsql
security definer set search_path = pg_catalog, pg_temp as $$
declare
  records text := (select relnamespace::regnamespace::text from pg_class
    where oid = ':RECORDS.job_history'::regclass);
  outcome text;
  retention interval;
  day date;
  ahead integer;
  part record;
  n bigint;
begin
  dropped := 0;
  deleted := 0;
  -- One pass at a time across workers.
  if not pg_try_advisory_xact_lock(hashtext(records || '.prune_history')) then
    return next;
    return;
  end if;
  perform set_config('lock_timeout', lock_wait, true);
  foreach outcome in array array['completed', 'failed', 'cancelled'] loop
    retention := case outcome when 'completed' then completed when 'failed' then failed else cancelled end;
    for ahead in -1..2 loop
      day := (at at time zone 'UTC')::date + ahead;
      begin
        if to_regclass(format('%s.%I', records, 'job_history_' || outcome || '_' || to_char(day, 'YYYYMMDD'))) is null
          and (retention is null or (day + 1)::timestamp at time zone 'UTC' > at - retention) then
          execute format('create table %s.%I partition of %s.%I for values from (%L) to (%L)',
            records, 'job_history_' || outcome || '_' || to_char(day, 'YYYYMMDD'),
            records, 'job_history_' || outcome,
            day::timestamp at time zone 'UTC', (day + 1)::timestamp at time zone 'UTC');
        end if;
      exception when lock_not_available or check_violation or duplicate_table then
        -- Busy, or the default partition holds rows of that day: next pass, or never (they
        -- are pruned from the default partition).
      end;
    end loop;
    continue when retention is null;
    for part in
      select child.relname
      from pg_inherits
      join pg_class as child on child.oid = pg_inherits.inhrelid
      where pg_inherits.inhparent = format('%s.%I', records, 'job_history_' || outcome)::regclass
        and child.relname ~ '_\d{8}$'
        and (to_date(right(child.relname, 8), 'YYYYMMDD') + 1)::timestamp at time zone 'UTC' <= at - retention
    loop
      begin
        execute format('drop table %s.%I', records, part.relname);
        dropped := dropped + 1;
      exception when lock_not_available then
      end;
    end loop;
    execute format('delete from %s.%I where ctid = any(array(select ctid from %s.%I where finished_at < $1 limit $2))',
      records, 'job_history_' || outcome || '_default', records, 'job_history_' || outcome || '_default')
      using at - retention, batch;
    get diagnostics n = row_count;
    deleted := deleted + n;
  end loop;
  delete from :RECORDS.job_waiters
  where job_waiters.pid not in (select pg_stat_activity.pid from pg_stat_activity where pid is not null);
  return next;
end
$$;
