-- Delete: the rows go, as graphile-worker's complete_jobs deletes them.
select jobs.id from :SCHEMA.complete_jobs(array(select batch.id from batch)) as jobs
