-- The jobs a bulk action picks: the one place its filter (`formica::BulkFilter`) becomes
-- SQL, for the dry run's count and for each batch of the real run alike. Ids after $1 and
-- up to $2, in ascending order, at most $3 (null: all). A job a worker holds never matches
-- (a running job is never touched); the last condition is the action's own (a retry picks
-- jobs that have failed, a cancel jobs that would still run). The filters, each null for
-- any: $4 ids, $5 task, $6 named queue, $7 states (as the dashboard names them), $8 only jobs that have
-- failed at least once (false: any), $9 text in last_error (case-insensitive), $10 and $11
-- the range [since, before) of created_at (when the job was added: a row records no time of
-- failure),
-- $12 and $13 the least and most attempts, $14 the job key.
select jobs.id
from :SCHEMA._private_jobs as jobs
where jobs.id > $1::bigint and jobs.id <= $2::bigint
  and jobs.locked_at is null
  and ($4::bigint[] is null or jobs.id = any($4::bigint[]))
  and ($5::text is null or jobs.task_id =
    (select tasks.id from :SCHEMA._private_tasks as tasks where tasks.identifier = $5::text))
  and ($6::text is null or jobs.job_queue_id =
    (select queues.id from :SCHEMA._private_job_queues as queues where queues.queue_name = $6::text))
  and ($7::text[] is null or :JOB_STATE = any($7::text[]))
  and (not $8::bool or jobs.last_error is not null)
  and ($9::text is null or strpos(lower(jobs.last_error), lower($9::text)) > 0)
  and ($10::timestamptz is null or jobs.created_at >= $10::timestamptz)
  and ($11::timestamptz is null or jobs.created_at < $11::timestamptz)
  and ($12::int is null or jobs.attempts >= $12::int)
  and ($13::int is null or jobs.attempts <= $13::int)
  and ($14::text is null or jobs.key = $14::text)
  and (/*:ELIGIBLE*/)
order by jobs.id
limit $3::bigint
