-- The statements that write history tell the waiters themselves (sql/queries/history/
-- notify.sql), so the trigger of step 7 goes. It kept every inserted row in a transition
-- table, to look at the waiters once a statement: about a microsecond of PostgreSQL's CPU a
-- job, paid by every drain whether anyone waited or not (docs/performance.md, "History").
drop trigger notify_job_waiters on :RECORDS.job_history;
drop function :RECORDS.notify_job_waiters();
