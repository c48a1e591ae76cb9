-- The recent pace of task $1 from the job history: of its jobs that ended for good in the
-- last $2 milliseconds (the day partitions and the BRIN index on finished_at narrow the
-- read to them), at most $3, how many and the first and last of their ends.
select count(*) as finished, min(recent.finished_at) as first, max(recent.finished_at) as last
from (
  select history.finished_at
  from :RECORDS.job_history as history
  where history.task_identifier = $1::text
    and history.finished_at > now() - $2::bigint * interval '1 millisecond'
  limit $3::bigint
) as recent
