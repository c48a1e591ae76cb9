-- Send the signal $2 to the workflow $1 with the payload $3 (JSON or null): see
-- signal_workflow in sql/records/000023.sql. Row: the outcome ('received', 'duplicate',
-- 'not_waiting', 'missing'), the names of the jobs that got it and of those released.
select signalled.outcome,
  array(select jobs.name from :RECORDS.workflow_jobs as jobs where jobs.id = any(signalled.received) order by jobs.id),
  array(select jobs.name from :RECORDS.workflow_jobs as jobs where jobs.id = any(signalled.released) order by jobs.id)
from :RECORDS.signal_workflow($1::bigint, $2::text, $3::jsonb) as signalled
