-- The reindexing chore's lock, held by the session for one pass: `$1` lock (true) or unlock
-- (false). One key per schema (`:RECORDS` names it), so one pass at a time across workers.
select case when $1::bool then pg_try_advisory_lock(hashtext('formica reindex :RECORDS'))
  else pg_advisory_unlock(hashtext('formica reindex :RECORDS')) end as held
