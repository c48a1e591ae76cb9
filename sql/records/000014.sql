-- One fetch function for caps and rate limits: lock_jobs_limited (records migration 10) with
-- no limits is what lock_jobs_capped (migration 6) does, so the capped one becomes a call of
-- it, and a fix to the fetch is made once. Formica workers of this version fetch with
-- lock_jobs_limited whenever a task they take is capped or limited; lock_jobs_capped stays,
-- with its signature and answer, for the workers of an older Formica still running during a
-- rollout (they call it for caps alone). Both take the same per-task advisory locks, so an
-- old worker's capped fetch and a new one's of the same task still run one after the other.
create or replace function :RECORDS.lock_jobs_capped(
  worker_id text, task_identifiers text[], forbidden_flags text[], due_by timestamptz, max_jobs int,
  accepted_flags text[], excluded_queues text[], cap_tasks text[], cap_max int[], cap_kinds text[],
  cap_args text[]
) returns table (
  id bigint, job_queue_id integer, task_id integer, payload json, priority smallint, run_at timestamptz,
  attempts smallint, max_attempts smallint, last_error text, created_at timestamptz,
  updated_at timestamptz, key text, locked_at timestamptz, locked_by text, revision integer,
  flags jsonb, is_available boolean
) language sql volatile as $$
  select * from :RECORDS.lock_jobs_limited(worker_id, task_identifiers, forbidden_flags, due_by, max_jobs,
    accepted_flags, excluded_queues, cap_tasks, cap_max, cap_kinds, cap_args,
    '{}'::text[], '{}'::int[], '{}'::int[], '{}'::text[], '{}'::text[])
$$;
