-- Added to sql/queries/worker/fail_jobs.sql with history on: each job this failure leaves
-- out of attempts (its last one failed, it was cancelled, or it did not stop) gets its history
-- row in the same statement; a cancelled one (its error begins with "cancelled: ", the core's
-- wording, core/src/worker/cancel.rs) as `cancelled`. `started_at`: when this last attempt
-- was locked, read from the row as it was before this statement (its snapshot).
history as (
  insert into :RECORDS.job_history (job_id, task_identifier, queue_name, key, payload, attempts,
    max_attempts, outcome, last_error, added_at, started_at, finished_at, worker_id)
  select failed.id, coalesce(tasks.identifier, 'task ' || failed.task_id), job_queues.queue_name,
    failed.key, failed.payload, failed.attempts, failed.max_attempts,
    case when failed.permanent and failed.last_error like 'cancelled: %' then 'cancelled' else 'failed' end,
    failed.last_error, failed.created_at, before.locked_at, now(), $1::text
  from failed
  left join :SCHEMA._private_jobs as before on before.id = failed.id
  left join :SCHEMA._private_tasks as tasks on tasks.id = failed.task_id
  left join :SCHEMA._private_job_queues as job_queues on job_queues.id = failed.job_queue_id
  where failed.attempts >= failed.max_attempts
),
