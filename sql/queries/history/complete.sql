-- Added to sql/queries/worker/complete_jobs.sql with history on: each job completed gets its
-- history row in the same statement. `started_at`: when this last attempt was locked. The
-- markers take the outputs, where some of the statement's jobs have one: `$4` given for
-- its id in `$3` (the handler's value, as JSON text). Without, the statement joins nothing
-- to them (an empty join still hashed every job completed: 0.5 us a job, `bench/history-cost`).
history as (
  insert into :RECORDS.job_history (job_id, task_identifier, queue_name, key, payload, attempts,
    max_attempts, outcome, last_error, added_at, started_at, finished_at, worker_id /*:OUTPUT_COLUMN*/)
  select completed.id, coalesce(tasks.identifier, 'task ' || completed.task_id), job_queues.queue_name,
    completed.key, completed.payload, completed.attempts, completed.max_attempts, 'completed',
    completed.last_error, completed.created_at, completed.locked_at, now(), $1::text /*:OUTPUT*/
  from completed
  left join :SCHEMA._private_tasks as tasks on tasks.id = completed.task_id
  left join :SCHEMA._private_job_queues as job_queues on job_queues.id = completed.job_queue_id
  /*:OUTPUTS*/
),
