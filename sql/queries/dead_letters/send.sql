-- Added to sql/queries/worker/fail_jobs.sql: each job this failure leaves out of attempts
-- (its last one failed, or it did not stop; not one cancelled) whose task has a dead letter
-- (records' dead_letters) becomes a job of its target task, whose payload carries it: its
-- id, task, payload (the one this failure stores), last error and attempts. Sends are
-- counted per task: an insert runs its select to the end exactly once, where a select's
-- CTE would run only as far as it is read. The jobs' task ids are read from the rows as
-- they were before this statement (its snapshot). With no dead letter set, the join with
-- the empty table ends it before it reads a job.
dead_letters as (
  insert into :RECORDS.dead_letter_sends as sends (task, sent, last_job_id, last_sent_at)
  select tasks.identifier, count(*),
    max((:SCHEMA.add_job(letters.target, json_build_object(
      'job_id', failed.id, 'task', tasks.identifier,
      'payload', coalesce(u.payload::json, before.payload),
      'last_error', u.message, 'attempts', before.attempts))).id),
    now()
  from failed
  join :SCHEMA._private_jobs as before on before.id = failed.id
  join :SCHEMA._private_tasks as tasks on tasks.id = before.task_id
  join :RECORDS.dead_letters as letters on letters.task = tasks.identifier
  join unnest($2::bigint[], $3::text[], $5::bool[], $6::text[]) as u(id, message, permanent, payload)
    on u.id = failed.id
  where (u.permanent or before.attempts >= before.max_attempts)
    and not (u.permanent and u.message like 'cancelled: %')
  group by tasks.identifier
  on conflict (task) do update set sent = sends.sent + excluded.sent,
    last_job_id = excluded.last_job_id, last_sent_at = excluded.last_sent_at
),
