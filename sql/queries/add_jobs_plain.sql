-- Insert jobs that have neither a job key nor a queue, all or none: what add_jobs does for
-- such jobs (no key can clash, no queue needs registering), without its per-row conflict
-- check, its intermediate result and a JSON spec to parse. Columns, one element per job:
-- $1 identifier, $2 payload (null: {}), $3 run_at (null: now), $4 max_attempts (null: 25),
-- $5 priority (null: 0), $6 flags (a JSON array of strings, or null). When a task is not
-- registered yet, nothing is inserted and no row comes back: the caller then goes through
-- add_jobs, which registers it.
with specs as (
  select * from unnest($1::text[], $2::json[], $3::timestamptz[], $4::int[], $5::int[], $6::json[])
    with ordinality as spec(identifier, payload, run_at, max_attempts, priority, flags, n)
),
known as (
  select specs.*, tasks.id as task_id
  from specs
  inner join :SCHEMA._private_tasks as tasks on tasks.identifier = specs.identifier
),
inserted as (
  insert into :SCHEMA._private_jobs (task_id, payload, run_at, max_attempts, priority, flags)
  select
    known.task_id,
    coalesce(known.payload, '{}'::json),
    coalesce(known.run_at, now()),
    coalesce(known.max_attempts, 25),
    coalesce(known.priority, 0),
    (select jsonb_object_agg(flag, true) from json_array_elements_text(known.flags) as flag)
  from known
  where (select count(*) from known) = (select count(*) from specs)
  order by known.n
  returning *
),
-- The message add_jobs sends; `r` keeps PostgreSQL from folding identical notifications.
notified as (
  select pg_notify('jobs:insert', '{"r":' || random()::text || ',"count":' || added.count::text || '}')
  from (select count(*) as count from inserted) as added
  where added.count > 0
)
select inserted.*, tasks.identifier as task_identifier, null::text as queue_name
from inserted
inner join :SCHEMA._private_tasks as tasks on tasks.id = inserted.task_id
cross join notified
order by inserted.id
