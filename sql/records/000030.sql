-- One pass of the history's pruner, its partitions' DDL last (sql/src/history.rs, PRUNE).
-- `prune_history` creates the days to come and drops the days past retention first, and
-- each of those statements locks its outcome's partitioned table against every insert
-- until the pass commits. The pass then deleted the reports and the finished workflows past
-- retention (up to `batch` rows each), so every completion that wrote history waited for
-- those deletes too, once a day (or at a fresh database's first pass). Here the deletes come
-- first, and `prune_history` (with its DDL) last, so the lock is held for its own rows only:
-- those of days that had no partition yet, usually none. Same arguments and answer as
-- `prune_history`, `deleted` counting all three.
create function :RECORDS.prune_pass(
  at timestamptz, completed interval, failed interval, cancelled interval,
  batch integer, lock_wait text
) returns table (dropped integer, deleted bigint) language plpgsql
set search_path = pg_catalog, pg_temp set jit = off as $$
declare
  others bigint;
begin
  -- As before, when prune_history set it first: a row another transaction holds fails the
  -- pass after `lock_wait` (tried again next pass) rather than keeping it waiting.
  perform set_config('lock_timeout', lock_wait, true);
  others := :RECORDS.prune_job_reports(at, completed, failed, cancelled, batch)
    + :RECORDS.prune_workflows(at, completed, failed, cancelled, batch);
  return query select history.dropped, history.deleted + others
    from :RECORDS.prune_history(at, completed, failed, cancelled, batch, lock_wait) as history;
end
$$;
