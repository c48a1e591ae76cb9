-- Reschedule: $15 run_at, $16 priority, $17 attempts, $18 max_attempts (null: unchanged).
select jobs.id
from :SCHEMA.reschedule_jobs(array(select batch.id from batch), $15::timestamptz, $16::int, $17::int, $18::int) as jobs
