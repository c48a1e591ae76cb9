delete from :SCHEMA._private_job_queues as job_queues
where job_queues.locked_at is null
  and not exists (
    select 1 from :SCHEMA._private_jobs as jobs where jobs.job_queue_id = job_queues.id)
