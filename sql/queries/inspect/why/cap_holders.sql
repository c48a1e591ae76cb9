-- The jobs holding the slots of task $1's cap: its jobs locked now, those of partition $4
-- when the cap has one ($2 kind, $3 argument; grouped as lock_jobs_limited groups them,
-- sql/records/000010.sql); at most $5, the cap's size. graphile-worker's schema has no index
-- on locks, so this reads the jobs table until it has found $5 (the capped fetch reads it so
-- too): `formica why` sends it only for a due job whose task is capped.
select jobs.id, jobs.locked_by, jobs.locked_at
from :SCHEMA._private_jobs as jobs
where jobs.task_id = (select tasks.id from :SCHEMA._private_tasks as tasks where tasks.identifier = $1::text)
  and jobs.locked_at is not null
  and coalesce(case $2::text when 'field' then jobs.payload ->> $3::text
    when 'key_prefix' then split_part(jobs.key, $3::text, 1) end, '') = $4::text
limit $5::bigint
