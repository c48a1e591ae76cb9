-- Jobs matching filters; `JOBS_ORDER` appends the page cursor, order and limit.
-- $1 task, $2 queue, $3 state, $4 key, $5 text in last_error (case-insensitive), each
-- null for any; $6 limit. Plain reads: no row is locked, workers are never waited for.
select jobs.*, tasks.identifier as task_identifier, job_queues.queue_name,
  :JOB_STATE as state
from :SCHEMA._private_jobs as jobs
inner join :SCHEMA._private_tasks as tasks on tasks.id = jobs.task_id
left join :SCHEMA._private_job_queues as job_queues on job_queues.id = jobs.job_queue_id
where ($1::text is null or tasks.identifier = $1::text)
  and ($2::text is null or job_queues.queue_name = $2::text)
  and ($3::text is null or :JOB_STATE = $3::text)
  and ($4::text is null or jobs.key = $4::text)
  and ($5::text is null or strpos(lower(jobs.last_error), lower($5::text)) > 0)
