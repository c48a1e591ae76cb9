-- Added to sql/queries/worker/recover_lapsed.sql (and reset_locked.sql) with history on: each
-- job freed out of attempts (its lost attempt was its last, or it was cancelled meanwhile)
-- has ended for good, and gets its history row in the same statement, as a failure does
-- (fail.sql): `cancelled` if its error says so, else `failed`. `worker_id`: the worker that
-- lost it and `started_at` when that attempt was locked (the row before this statement).
history as (
  insert into :RECORDS.job_history (job_id, task_identifier, queue_name, key, payload, attempts,
    max_attempts, outcome, last_error, added_at, started_at, finished_at, worker_id)
  select freed.id, coalesce(tasks.identifier, 'task ' || freed.task_id), job_queues.queue_name,
    freed.key, freed.payload, freed.attempts, freed.max_attempts,
    case when freed.last_error like 'cancelled: %' then 'cancelled' else 'failed' end,
    freed.last_error, freed.created_at, before.locked_at, now(), before.locked_by
  from jobs_freed as freed
  left join :SCHEMA._private_jobs as before on before.id = freed.id
  left join :SCHEMA._private_tasks as tasks on tasks.id = freed.task_id
  left join :SCHEMA._private_job_queues as job_queues on job_queues.id = freed.job_queue_id
  where freed.attempts >= freed.max_attempts
),
