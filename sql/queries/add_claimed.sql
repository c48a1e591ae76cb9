-- add_job.sql's add ($1 to $9, the same), only if this statement claims the job key $6 for
-- $10 microseconds by the database clock: the key was never claimed, or its claim expired.
-- Otherwise no row, and no job: one was added within the claim's period, finished or not.
-- Concurrent claims of one key wait on its primary key; the loser then sees the winner's
-- claim, unexpired. Also deletes up to 10 expired claims of other keys.
with pruned as (
  delete from :RECORDS.unique_claims
  where key in (
    select key from :RECORDS.unique_claims where until <= now() and key <> $6::text
    order by until limit 10 for update skip locked)
),
claim as (
  insert into :RECORDS.unique_claims as claims (key, until)
  values ($6::text, now() + $10::bigint * interval '1 microsecond')
  on conflict (key) do update set until = excluded.until where claims.until <= now()
  returning claims.key
)
-- BOUND: where the bounds are kept (formica_sql::flow::BOUND_ONE).
select jobs.*,
  coalesce(tasks.identifier, $1::text) as task_identifier,
  case when jobs.job_queue_id is not null then coalesce(job_queues.queue_name, $3::text) end as queue_name
from claim
cross join lateral :SCHEMA.add_job(
  identifier => $1::text, payload => $2::json, queue_name => $3::text,
  run_at => $4::timestamptz, max_attempts => $5::int, job_key => claim.key,
  priority => $7::int, flags => $8::text[], job_key_mode => $9::text) as jobs
left join :SCHEMA._private_tasks as tasks on tasks.id = jobs.task_id
left join :SCHEMA._private_job_queues as job_queues on job_queues.id = jobs.job_queue_id
where jobs.id is not null
/*:BOUND*/
