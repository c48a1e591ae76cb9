-- The fetch of a worker some of whose tasks are capped, rate limited or fair: see
-- :RECORDS.lock_jobs_controlled (sql/records/000026.sql) for the parameters (the arrays of a
-- kind no task fetched has are empty). Rows as worker/get_jobs.sql's; the comments mark where
-- the traced fetch adds each job's trace context. The names are read by fetched_names
-- (records step 21), not joined here: this statement's snapshot predates the function's, and
-- misses the task row of a job added in between.
select locked.*, names.task_identifier, names.queue_name /*:TRACE_COLUMNS*/
from :RECORDS.lock_jobs_controlled($1::text, $2::text[], $3::text[], $4::timestamptz, $5::int, $6::text[],
  $7::text[], $8::text[], $9::int[], $10::text[], $11::text[], $12::text[], $13::int[], $14::int[],
  $15::text[], $16::text[], $17::text[], $18::text[], $19::text[], $20::text[]) as locked
cross join lateral :RECORDS.fetched_names(locked.task_id, locked.job_queue_id) as names
/*:TRACE_JOIN*/
order by locked.priority, locked.run_at, locked.id
