-- Add the workflow $1 of the jobs $2 (JSON, validated by the driver: see add_workflow in
-- sql/records/000011.sql). Rows: its id, with each job released at once (name, job id; a
-- single row with nulls if none is).
select added.workflow_id, added.name, added.job_id
from :RECORDS.add_workflow($1::text, $2::json) as added
