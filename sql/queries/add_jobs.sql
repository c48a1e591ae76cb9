-- $1 a JSON array of job_spec objects, $2 job_key_preserve_run_at.
-- Names of tasks and queues that add_jobs creates are not visible to this statement's
-- joins (null here): the caller looks them up afterwards with NAMES.
select jobs.*, tasks.identifier as task_identifier, job_queues.queue_name
from :SCHEMA.add_jobs(
  array(select json_populate_recordset(null:::SCHEMA.job_spec, $1::json)),
  $2::boolean) as jobs
left join :SCHEMA._private_tasks as tasks on tasks.id = jobs.task_id
left join :SCHEMA._private_job_queues as job_queues on job_queues.id = jobs.job_queue_id
order by jobs.id
