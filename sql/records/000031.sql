-- The trigger that tells the waiters whose job ended (tell_job_waiters, records step 27) looks
-- at every waiter after each statement that writes history, by an anti-join of the waiters
-- and graphile_worker's jobs. Past a few hundred waiters (live ones, or those of sessions
-- gone, kept until the pruner's next pass), PostgreSQL chose to hash or merge the whole jobs
-- table for it, at every such statement, a cost that grows with the queue:
-- `WAITERS=1000 VARIANTS="on on_any_join" bench/history-cost` (about 110,000 jobs queued)
-- gave 25.9 us a completed job, against 6.1 with no waiter. Each waiter's job is now found
-- by its primary key, one probe a waiter whatever the queue's size: 8.6 us there.
alter function :RECORDS.tell_job_waiters() set enable_hashjoin = off;
alter function :RECORDS.tell_job_waiters() set enable_mergejoin = off;
