-- Cancel: fail for good with last_error 'cancelled: ' || $15, as cancel_jobs does to a
-- job no worker holds.
select jobs.id from :SCHEMA.permanently_fail_jobs(array(select batch.id from batch), 'cancelled: ' || $15::text) as jobs
