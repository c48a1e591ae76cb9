-- Whether job $1 is still to finish: its row exists and has attempts left or is held. The
-- share lock waits for a statement completing or failing it to commit, so a waiter that
-- registered before reading this sees either that statement's history row or its
-- notification (the trigger tell_job_waiters, records step 27).
select exists (
  select from :SCHEMA._private_jobs as jobs
  where jobs.id = $1::bigint and (jobs.attempts < jobs.max_attempts or jobs.locked_at is not null)
  for share
)
