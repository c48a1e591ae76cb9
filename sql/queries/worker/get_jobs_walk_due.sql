-- What makes a job one get_jobs_walk.sql may take, in each priority's range and in the rest:
-- due, of the worker's tasks, in no queue or a free one, with no flag refused and one flag
-- required if any are.
and jobs.is_available = true
      and jobs.run_at <= coalesce($4::timestamptz, now())
      and jobs.task_id = any(tasks.ids)
      and (jobs.job_queue_id is null or jobs.job_queue_id in (select free_queues.id from free_queues))
      and (jobs.flags ?| $3::text[]) is not true
      and (cardinality($6::text[]) = 0 or (jobs.flags ?| $6::text[]) is true)
