-- Delete the workflow $1 and its rows, refused while a job of it is waiting or released
-- unless $2 (force): see delete_workflow in sql/records/000022.sql. Row: 'missing',
-- 'unfinished' or 'deleted', with its jobs waiting and released then.
select deleted.state, deleted.waiting, deleted.released
from :RECORDS.delete_workflow($1::bigint, $2::boolean) as deleted
