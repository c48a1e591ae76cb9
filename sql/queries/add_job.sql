-- $1 identifier, $2 payload, $3 queue_name, $4 run_at, $5 max_attempts, $6 job_key,
-- $7 priority, $8 flags, $9 job_key_mode. No row when add_job returned none (the keyed
-- job was locked between its checks: the caller may retry).
-- A task or queue row that add_job creates is not visible to this statement's joins (they
-- read the snapshot taken before it ran); such a row is the one named in the arguments.
-- BOUND: where the bounds are kept (formica_sql::flow::BOUND_ONE).
select jobs.*,
  coalesce(tasks.identifier, $1::text) as task_identifier,
  case when jobs.job_queue_id is not null then coalesce(job_queues.queue_name, $3::text) end as queue_name
from :SCHEMA.add_job(
  identifier => $1::text, payload => $2::json, queue_name => $3::text,
  run_at => $4::timestamptz, max_attempts => $5::int, job_key => $6::text,
  priority => $7::int, flags => $8::text[], job_key_mode => $9::text) as jobs
left join :SCHEMA._private_tasks as tasks on tasks.id = jobs.task_id
left join :SCHEMA._private_job_queues as job_queues on job_queues.id = jobs.job_queue_id
where jobs.id is not null
/*:BOUND*/
