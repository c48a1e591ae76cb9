-- Lift the aging of task $1: its waiting jobs the chore changed get their own priority back
-- (a locked job keeps what it has, and one whose priority was changed since keeps that), and
-- their originals are forgotten. Rows: one if there was an aging.
with lifted as (
  delete from :RECORDS.aging as aging where aging.task = $1::text returning aging.task
),
forgotten as (
  delete from :RECORDS.aged_jobs as aged
  using :SCHEMA._private_jobs as jobs, :SCHEMA._private_tasks as tasks
  where aged.job_id = jobs.id and jobs.task_id = tasks.id and tasks.identifier = $1::text
    and exists (select from lifted)
  returning aged.job_id, aged.original, aged.aged
),
restored as (
  update :SCHEMA._private_jobs as jobs set priority = forgotten.original
  from forgotten
  where jobs.id = forgotten.job_id and jobs.priority = forgotten.aged and jobs.is_available = true
    and jobs.id in (
      select waiting.id from :SCHEMA._private_jobs as waiting
      where waiting.id in (select forgotten.job_id from forgotten)
      for update skip locked
    )
  returning jobs.id
)
select lifted.task from lifted
