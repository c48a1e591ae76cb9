-- add_job.sql's add ($1 to $8 the same) in job_key_mode $9 'replace_and_abort': a job holding
-- the key $6 that a worker runs is stopped and the new job held behind it
-- (:RECORDS.hold_for_replace, before add_job in this statement), then add_job replaces as
-- 'replace' does. One statement: the abort request and the new job commit together.
-- BOUND: where the bounds are kept (formica_sql::flow::BOUND_ONE).
select jobs.*,
  coalesce(tasks.identifier, $1::text) as task_identifier,
  case when jobs.job_queue_id is not null then coalesce(job_queues.queue_name, held.queue_name) end as queue_name
from :RECORDS.hold_for_replace($6::text, $3::text) as held(queue_name)
cross join lateral :SCHEMA.add_job(
  identifier => $1::text, payload => $2::json, queue_name => held.queue_name,
  run_at => $4::timestamptz, max_attempts => $5::int, job_key => $6::text,
  priority => $7::int, flags => $8::text[], job_key_mode => 'replace') as jobs
left join :SCHEMA._private_tasks as tasks on tasks.id = jobs.task_id
left join :SCHEMA._private_job_queues as job_queues on job_queues.id = jobs.job_queue_id
where jobs.id is not null and $9::text = 'replace_and_abort'
/*:BOUND*/
