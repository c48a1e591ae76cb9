-- $1 task ids, $2 queue ids: their names, as ('task' | 'queue', id, name).
select 'task' as kind, tasks.id, tasks.identifier as name
from :SCHEMA._private_tasks as tasks where tasks.id = any($1::int[])
union all
select 'queue', job_queues.id, job_queues.queue_name
from :SCHEMA._private_job_queues as job_queues where job_queues.id = any($2::int[])
