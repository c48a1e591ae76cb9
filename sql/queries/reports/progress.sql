-- The progress of jobs, the latest of each as one worker coalesced it: $1 job ids, $2
-- fractions (null: none), $3 values as JSON text (null: none). One statement for every job
-- that reported since the last, then a notification naming them (`wait_for_progress`).
with written as (
  insert into :RECORDS.job_progress (job_id, fraction, value, updated_at)
  select reported.job_id, reported.fraction, reported.value::jsonb, now()
  from unnest($1::bigint[], $2::float8[], $3::text[]) as reported (job_id, fraction, value)
  on conflict (job_id) do update
    set fraction = excluded.fraction, value = excluded.value, updated_at = excluded.updated_at
  returning job_id
)
select pg_notify('formica:progress', string_agg(job_id::text, ',')) from written
