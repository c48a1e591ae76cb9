-- $1 identifiers to keep (those of running workers): deleting one a worker has cached
-- would hide its jobs from it.
delete from :SCHEMA._private_tasks as tasks
where tasks.identifier <> all($1::text[])
  and not exists (select 1 from :SCHEMA._private_jobs as jobs where jobs.task_id = tasks.id)
