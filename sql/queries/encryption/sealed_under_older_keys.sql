-- Waiting jobs whose payload is sealed (docs/guide/encrypted-payloads.md) under a key other
-- than $2, by id after $3, $4 at most: id, task, payload as text. $1 is the envelope's one
-- member. A rotation reads every job once, in id order; held jobs are left.
with sealed as (
  select jobs.id, jobs.task_id, jobs.payload,
    case when json_typeof(jobs.payload) = 'object' then jobs.payload -> $1::text ->> 'key' end as key
  from :SCHEMA._private_jobs as jobs
  where jobs.id > $3::bigint and jobs.locked_at is null
)
select sealed.id, tasks.identifier, sealed.payload::text
from sealed
inner join :SCHEMA._private_tasks as tasks on tasks.id = sealed.task_id
where sealed.key is not null and sealed.key <> $2::text
order by sealed.id
limit $4::bigint
