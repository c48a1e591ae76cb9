-- Retry: due now with a fresh set of attempts (attempts 0, max_attempts as it was), as
-- graphile-worker's reschedule_jobs leaves them; last_error stays until the job succeeds.
select jobs.id from :SCHEMA.reschedule_jobs(array(select batch.id from batch), now(), null, 0, null) as jobs
