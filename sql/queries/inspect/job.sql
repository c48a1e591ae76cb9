-- One job with its state, the lock on its named queue and its progress. $1 job id.
select jobs.*, tasks.identifier as task_identifier, job_queues.queue_name,
  :JOB_STATE as state,
  job_queues.locked_by as queue_locked_by, job_queues.locked_at as queue_locked_at,
  progress.fraction as progress_fraction, progress.value::text as progress_value,
  progress.updated_at as progress_at
from :SCHEMA._private_jobs as jobs
inner join :SCHEMA._private_tasks as tasks on tasks.id = jobs.task_id
left join :SCHEMA._private_job_queues as job_queues on job_queues.id = jobs.job_queue_id
left join :RECORDS.job_progress as progress on progress.job_id = jobs.id
where jobs.id = $1::bigint
