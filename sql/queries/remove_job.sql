-- $1 job_key.
select jobs.*, tasks.identifier as task_identifier, job_queues.queue_name
from :SCHEMA.remove_job($1::text) as jobs
inner join :SCHEMA._private_tasks as tasks on tasks.id = jobs.task_id
left join :SCHEMA._private_job_queues as job_queues on job_queues.id = jobs.job_queue_id
where jobs.id is not null
