-- The crontab of each live worker that runs one (its lease holds, by the database clock).
select worker_id, crontab
from :RECORDS.leases
where expires_at > now() and crontab is not null
order by worker_id
