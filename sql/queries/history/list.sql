-- History rows, newest jobs (by id) first: $1 task, $2 queue, $3 outcome, $4 text in
-- last_error, $5 job id (each null: any), $6 at most. Walks the job_id index of each
-- partition backwards, merged; a job's runs newest first.
select job_id, task_identifier, queue_name, key, payload, attempts, max_attempts, outcome,
  last_error, added_at, started_at, finished_at, worker_id, output
from :RECORDS.job_history
where ($1::text is null or task_identifier = $1::text)
  and ($2::text is null or queue_name = $2::text)
  and ($3::text is null or outcome = $3::text)
  and ($4::text is null or strpos(last_error, $4::text) > 0)
  and ($5::bigint is null or job_id = $5::bigint)
order by job_id desc, finished_at desc
limit $6::int
