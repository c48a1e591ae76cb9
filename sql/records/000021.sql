-- The controlled fetch's task identifiers and queue names, read after its locks
-- (get_jobs_controlled.sql). That fetch is a statement calling lock_jobs_limited, a volatile
-- function: the jobs it locks are found under snapshots taken inside it, later than the
-- calling statement's own. Joined in the calling statement, a job whose add committed in
-- between found no row of its task (the add made it) and was dropped from the answer: locked,
-- counted against its rate limit, and never started (its worker did not know it held it). A
-- volatile function reads under a snapshot taken when it is called, after the job's lock, so
-- every row the lock saw is seen.
create function :RECORDS.fetched_names(of_task integer, of_queue integer, out task_identifier text,
  out queue_name text)
language plpgsql volatile as $$
begin
  select tasks.identifier into task_identifier from :SCHEMA._private_tasks as tasks where tasks.id = of_task;
  select job_queues.queue_name into queue_name
  from :SCHEMA._private_job_queues as job_queues where job_queues.id = of_queue;
end
$$;
