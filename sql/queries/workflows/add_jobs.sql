-- Add the jobs $2 (JSON, validated by the driver) to the workflow of the running job $1 (its
-- graphile_worker job id): see add_workflow_jobs in sql/records/000024.sql. Rows: whether the
-- job was found running in a workflow, then each job's workflow, name, job id (if released)
-- and whether this call added it.
select added.found, added.workflow_id, added.name, added.job_id, added.added
from :RECORDS.add_workflow_jobs($1::bigint, $2::json) as added
