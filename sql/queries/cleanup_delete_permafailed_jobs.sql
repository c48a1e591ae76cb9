delete from :SCHEMA._private_jobs as jobs
where jobs.attempts = jobs.max_attempts and jobs.locked_at is null
