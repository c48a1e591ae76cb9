-- The starts of task $1 in partition $2 of its rate limit over partition key $4 (as
-- rate_starts.per names it) logged within the last $3 milliseconds, oldest first: a range of the index rate_starts_task (a row per fetch, so
-- at most the limit's max rows).
select starts.started_at, starts.n
from :RECORDS.rate_starts as starts
where starts.task = $1::text
  and starts.started_at > now() - $3::bigint * interval '1 millisecond'
  and starts.part = $2::text
  and starts.per = $4::text
order by starts.started_at
