-- Schedule the slot $2 (a whole minute) of the crontab items $1, a JSON array of
-- {identifier, task, payload, queue_name, max_attempts, priority, job_key, job_key_mode}.
-- An item's job is added only by the statement that advances its last_execution to $2, so
-- any number of workers (Formica or graphile-worker) add each (identifier, minute) once.
-- Each job runs at its slot time. Rows: the ids of the jobs added.
with specs as (
  select entries.index, entries.spec->>'identifier' as identifier
    , entries.spec->>'task' as task, entries.spec->'payload' as payload
    , entries.spec->>'queue_name' as queue_name, (entries.spec->>'max_attempts')::int as max_attempts
    , (entries.spec->>'priority')::int as priority, entries.spec->>'job_key' as job_key
    , coalesce(entries.spec->>'job_key_mode', 'replace') as job_key_mode
  from json_array_elements($1::json) with ordinality as entries(spec, index)
),
advanced as (
  insert into :SCHEMA._private_known_crontabs as known_crontabs (identifier, known_since, last_execution)
  select specs.identifier, $2::timestamptz, $2::timestamptz from specs
  on conflict (identifier) do update set last_execution = excluded.last_execution
  where known_crontabs.last_execution is null or known_crontabs.last_execution < excluded.last_execution
  returning known_crontabs.identifier
)
select (:SCHEMA.add_job(specs.task, specs.payload, specs.queue_name, $2::timestamptz, specs.max_attempts,
  specs.job_key, specs.priority, null, specs.job_key_mode)).id
from specs
inner join advanced on advanced.identifier = specs.identifier
order by specs.index
