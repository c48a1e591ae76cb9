-- $1 task or null, $2 queue or null, $3 only failed ones, $4 only locked ones, $5 limit,
-- $6 state (see :JOB_STATE) or null.
select jobs.*, tasks.identifier as task_identifier, job_queues.queue_name
from :SCHEMA._private_jobs as jobs
inner join :SCHEMA._private_tasks as tasks on tasks.id = jobs.task_id
left join :SCHEMA._private_job_queues as job_queues on job_queues.id = jobs.job_queue_id
where ($1::text is null or tasks.identifier = $1::text)
  and ($2::text is null or job_queues.queue_name = $2::text)
  and (not $3::bool or jobs.last_error is not null)
  and (not $4::bool or jobs.locked_at is not null)
  and ($6::text is null or :JOB_STATE = $6::text)
order by jobs.id
limit $5::bigint
