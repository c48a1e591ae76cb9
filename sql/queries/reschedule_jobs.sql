-- $1 job ids, $2 run_at, $3 priority, $4 attempts, $5 max_attempts (null: unchanged).
select jobs.*, tasks.identifier as task_identifier, job_queues.queue_name
from :SCHEMA.reschedule_jobs($1::bigint[], $2::timestamptz, $3::int, $4::int, $5::int) as jobs
inner join :SCHEMA._private_tasks as tasks on tasks.id = jobs.task_id
left join :SCHEMA._private_job_queues as job_queues on job_queues.id = jobs.job_queue_id
order by jobs.id
