-- The pruner makes each day's partition apart, then attaches it (`prune_history`, records
-- step 7's, with that one statement changed). `create table ... partition of` took an
-- access exclusive lock on its outcome's partitioned table: it waited (up to the pass's
-- lock wait) behind every completion writing history, each completion after it queued
-- behind it, and it held the history against every insert until the pass committed: at a
-- fresh database's first pass (twelve days made at once), and each day after. Attaching
-- takes a share update exclusive lock on that table, which inserts do not conflict with;
-- the new table and the default partition (scanned for rows of the day) are locked whole,
-- and no insert goes to either while the day has its partition. Dropping a day past
-- retention still locks the outcome's table (PostgreSQL detaches without that lock only
-- outside a transaction), once a day.
create or replace function :RECORDS.prune_history(
  at timestamptz, completed interval, failed interval, cancelled interval,
  batch integer, lock_wait text
) returns table (dropped integer, deleted bigint) language plpgsql
security definer set search_path = pg_catalog, pg_temp set jit = off as $$
declare
  records text := (select relnamespace::regnamespace::text from pg_class
    where oid = ':RECORDS.job_history'::regclass);
  outcome text;
  retention interval;
  day date;
  ahead integer;
  part record;
  n bigint;
  partition_name text;
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
      partition_name := 'job_history_' || outcome || '_' || to_char(day, 'YYYYMMDD');
      begin
        if to_regclass(format('%s.%I', records, partition_name)) is null
          and (retention is null or (day + 1)::timestamp at time zone 'UTC' > at - retention) then
          -- Records step 32: made apart (with the columns and checks an attached partition
          -- must have), then attached.
          execute format('create table %s.%I (like %s.%I including defaults including constraints)',
            records, partition_name, records, 'job_history_' || outcome);
          execute format('alter table %s.%I attach partition %s.%I for values from (%L) to (%L)',
            records, 'job_history_' || outcome, records, partition_name,
            day::timestamp at time zone 'UTC', (day + 1)::timestamp at time zone 'UTC');
        end if;
      exception when lock_not_available or check_violation or duplicate_table then
        -- Busy, or the default partition holds rows of that day: next pass, or never (they
        -- are pruned from the default partition). The table made apart goes with the rest.
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

-- And the days around the migration's date are made now: a new database's first history
-- went to the default partition until the first pass, which then could not make that day
-- (the default partition held rows of it), so the day's rows were deleted one by one at
-- retention instead of dropped with their day. (Keeping every outcome: nothing dropped.)
select :RECORDS.prune_history(now(), null, null, null, 0, '10s');
