-- Insert jobs that have neither a job key nor a queue, all or none: what add_jobs does for
-- such jobs (no key can clash, no queue needs registering), without its per-row conflict
-- check, its intermediate results and a JSON spec to parse. $1 the distinct task
-- identifiers; then columns, one element per job, as stored (the caller fills in the
-- defaults): $2 its identifier's place in $1 (from 1), $3 payload, $4 run_at (null: now),
-- $5 max_attempts, $6 priority, $7 flags (an object of `true`s, or null). Rows: id, run_at,
-- created_at, updated_at of each job, in the order given (the caller knows the rest). When
-- a task is not registered yet, or one is bounded (:RECORDS.bounds, where the bounds are
-- kept: BOUND, formica_sql::flow::BOUND_PLAIN), nothing is inserted and no row comes back:
-- the caller then goes through add_jobs, which registers it and keeps to the bound.
with tasks as (
  select array_agg(tasks.id order by wanted.n) as ids,
    count(*) = cardinality($1::text[])
      /*:BOUND*/ as all_known
  from unnest($1::text[]) with ordinality as wanted(identifier, n)
  inner join :SCHEMA._private_tasks as tasks on tasks.identifier = wanted.identifier
),
-- The message add_jobs sends, only when the jobs go in (it leaves with the commit, so not
-- at all if the insert fails); `r` keeps PostgreSQL from folding identical notifications.
notified as (
  select tasks.ids, pg_notify('jobs:insert', '{"r":' || random()::text || ',"count":' || cardinality($2::int[])::text || '}')
  from tasks
  where tasks.all_known and cardinality($2::int[]) > 0
)
-- The single row of `notified` drives the columns, unnested side by side as they are read
-- (no intermediate copy), so jobs are inserted (and numbered, and answered) in the order
-- given.
insert into :SCHEMA._private_jobs (task_id, payload, run_at, max_attempts, priority, flags)
select
  notified.ids[spec.task],
  spec.payload,
  coalesce(spec.run_at, now()),
  spec.max_attempts,
  spec.priority,
  spec.flags
from notified
cross join (
  select unnest($2::int[]) as task, unnest($3::json[]) as payload, unnest($4::timestamptz[]) as run_at,
    unnest($5::int[]) as max_attempts, unnest($6::int[]) as priority, unnest($7::jsonb[]) as flags
) as spec
returning id, run_at, created_at, updated_at
