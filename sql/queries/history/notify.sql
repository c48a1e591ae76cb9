-- Follows each history write (formica_sql::history): the waiters of the jobs it wrote a row
-- for (`WorkerUtils::wait_for_job`) are told on `formica:finished` (payload: the job id) and
-- their registrations removed, in the statement's transaction. One look at the waiters'
-- table a statement when nobody waits; the rows written are kept (their ids) only for it.
told as (
  delete from :RECORDS.job_waiters as waiters
  where exists (select from :RECORDS.job_waiters)
    and waiters.job_id in (select history.job_id from history)
  returning pg_notify('formica:finished', waiters.job_id::text)
),
