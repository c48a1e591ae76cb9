-- `$1` job id, `$2` step name, `$3` its output (JSON text), `$4` worker: record the step
-- finished, in the transaction of the step's own writes, only while worker `$4` still holds
-- the job. `for share` keeps the job's lock from moving (a recovery, a sweep) until the
-- transaction ends, so a step is never recorded for a job another worker now runs. One row:
-- whether it was recorded, and who holds the job (null: no one, or it is gone).
with recorded as (
  insert into :RECORDS.job_steps (job_id, name, output)
  select $1::bigint, $2::text, $3::text::json
  from :SCHEMA._private_jobs as jobs
  where jobs.id = $1::bigint and jobs.locked_by = $4::text
  for share of jobs
  returning true
)
select exists (select from recorded) as recorded,
  (select jobs.locked_by from :SCHEMA._private_jobs as jobs where jobs.id = $1::bigint) as holder
