-- The fetch of a worker some of whose tasks are capped, rate limited or fair: see
-- :RECORDS.lock_jobs_controlled (sql/records/000020.sql) for the parameters (the arrays of a
-- kind no task fetched has are empty). Rows as worker/get_jobs.sql's; the comments mark where the traced
-- fetch adds each job's trace context.
select locked.*, tasks.identifier as task_identifier, job_queues.queue_name /*:TRACE_COLUMNS*/
from :RECORDS.lock_jobs_controlled($1::text, $2::text[], $3::text[], $4::timestamptz, $5::int, $6::text[],
  $7::text[], $8::text[], $9::int[], $10::text[], $11::text[], $12::text[], $13::int[], $14::int[],
  $15::text[], $16::text[], $17::text[], $18::text[], $19::text[], $20::text[]) as locked
inner join :SCHEMA._private_tasks as tasks on tasks.id = locked.task_id
left join :SCHEMA._private_job_queues as job_queues on job_queues.id = locked.job_queue_id
/*:TRACE_JOIN*/
order by locked.priority, locked.run_at, locked.id
