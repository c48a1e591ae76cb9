-- $1 identifiers to keep (as graphile-worker's cleanup keeps those of its tasks). A running
-- Formica worker looks its tasks' ids up at each fetch, so a row deleted here hides nothing
-- from it: the next add_job of the task adds the row again.
delete from :SCHEMA._private_tasks as tasks
where tasks.identifier <> all($1::text[])
  and not exists (select 1 from :SCHEMA._private_jobs as jobs where jobs.task_id = tasks.id)
