-- add_job and add_jobs register task identifiers and queue names only when missing, so
-- the identity sequences are not consumed on every enqueue. The functions themselves are
-- (re)created after this file.
select 1;
