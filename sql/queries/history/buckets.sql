-- The history of the last $1 seconds (by the database clock) in buckets of $2 seconds: each
-- bucket's start, its jobs completed, failed and cancelled, and the mean seconds from a job's
-- add to the start of its last attempt. Buckets with no job are left out.
select to_timestamp(floor(extract(epoch from finished_at) / $2::int) * $2::int) as start,
  count(*) filter (where outcome = 'completed') as completed,
  count(*) filter (where outcome = 'failed') as failed,
  count(*) filter (where outcome = 'cancelled') as cancelled,
  avg(extract(epoch from started_at - added_at))::float8 as wait_seconds
from :RECORDS.job_history
where finished_at > now() - make_interval(secs => $1::int)
group by 1
order by 1
