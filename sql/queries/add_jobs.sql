-- $1 a JSON array of job_spec objects, $2 job_key_preserve_run_at.
-- Names of tasks and queues that add_jobs creates are not visible to this statement's
-- joins (null here): the caller looks them up afterwards with NAMES.
-- BOUND: where the bounds are kept (formica_sql::flow::BOUND_BATCH).
with added as materialized (
  select * from :SCHEMA.add_jobs(
    array(select json_populate_recordset(null:::SCHEMA.job_spec, $1::json)),
    $2::boolean)
)
select added.*, tasks.identifier as task_identifier, job_queues.queue_name
from added
left join :SCHEMA._private_tasks as tasks on tasks.id = added.task_id
left join :SCHEMA._private_job_queues as job_queues on job_queues.id = added.job_queue_id
/*:BOUND*/
order by added.id
