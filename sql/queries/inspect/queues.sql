-- Named queues and who holds each (a worker holds a queue while it runs one of its jobs).
select queue_name, locked_by, locked_at
from :SCHEMA._private_job_queues
order by queue_name
