-- The cancel requests for the jobs worker $1 holds: rows (job id, reason). Read from the
-- requests (usually none), each job found by its key: nothing on the fetch's path.
select requests.job_id, requests.reason
from :RECORDS.cancel_requests as requests
inner join :SCHEMA._private_jobs as jobs on jobs.id = requests.job_id
where jobs.locked_by = $1::text
order by requests.job_id
