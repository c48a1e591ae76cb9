-- The waiters of the jobs a statement ends (`WorkerUtils::wait_for_job`) are told by a
-- trigger after that statement, no longer by a part of it (step 15). That part read the
-- waiters as of the statement's start, and the statement locks each job only as it reaches
-- it: a waiter that registered and looked in between found its job still held, and was
-- never told (it waited out its timeout). This trigger runs once the statement has ended
-- every job it ends, and reads the waiters as they are then (each statement of a volatile
-- function takes a new snapshot): a registration it cannot see commits after it, and that
-- waiter's look (sql/queries/history/pending.sql) waits for the jobs' row locks, so it sees
-- its job ended. No transition table: a statement nobody waits on pays one look at the empty
-- waiters' table, and nothing a row.
create function :RECORDS.tell_job_waiters() returns trigger language plpgsql
set search_path = pg_catalog, pg_temp as $$
declare
  told record;
begin
  if exists (select from :RECORDS.job_waiters) then
    -- Every waiter whose job is no longer to finish (pending.sql's test, without the lock):
    -- those of this statement's jobs, and any whose job ended where nobody wrote history.
    -- A notification each: one listing them all could pass the payload's 8,000 bytes.
    for told in
      delete from :RECORDS.job_waiters as waiters
      where not exists (
        select from :SCHEMA._private_jobs as jobs
        where jobs.id = waiters.job_id and (jobs.attempts < jobs.max_attempts or jobs.locked_at is not null))
      returning waiters.job_id
    loop
      perform pg_notify('formica:finished', told.job_id::text);
    end loop;
  end if;
  return null;
end
$$;

create trigger tell_job_waiters after insert on :RECORDS.job_history
  for each statement execute function :RECORDS.tell_job_waiters();
