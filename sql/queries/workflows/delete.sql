-- Delete the workflow $1 and its rows, refused while a job of it is waiting or released,
-- or while a released job waits for it as its sub-workflow, unless $2 (force): see
-- delete_workflow in sql/records/000024.sql. Row: 'missing', 'held', 'unfinished' or
-- 'deleted', with its jobs waiting and released then, and the workflow and name of the job
-- holding it (failed, if forced).
select deleted.state, deleted.waiting, deleted.released, deleted.parent_workflow, deleted.parent_job
from :RECORDS.delete_workflow($1::bigint, $2::boolean) as deleted
