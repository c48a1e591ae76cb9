-- The pauses in force: rows (scope, name). A handful of rows at most, read by each worker
-- at start, on 'formica:flow' and every poll interval: nothing on the fetch's path.
select pauses.scope, pauses.name
from :RECORDS.pauses as pauses
order by pauses.scope, pauses.name
