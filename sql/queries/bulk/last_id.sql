-- The newest job's id: a bulk action walks the ids up to it, so jobs added meanwhile are
-- left alone and the walk ends.
select coalesce(max(jobs.id), 0)::bigint as last from :SCHEMA._private_jobs as jobs
