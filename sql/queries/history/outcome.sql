-- The newest history row of job $1 (a job retried after failing for good has one a run).
select job_id, task_identifier, queue_name, key, payload, attempts, max_attempts, outcome,
  last_error, added_at, started_at, finished_at, worker_id, output
from :RECORDS.job_history
where job_id = $1::bigint
order by finished_at desc
limit 1
