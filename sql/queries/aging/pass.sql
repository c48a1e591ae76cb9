-- One pass of the aging chore (see age_priorities in sql/records/000020.sql), changing at
-- most $1 jobs: how many it changed, null if another worker's pass was running.
select :RECORDS.age_priorities($1::int)
