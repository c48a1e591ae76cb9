-- Added to sql/queries/worker/complete_jobs.sql where the jobs completed include workflow
-- jobs (the driver knows them by their flag, docs/guide/workflows.md): the workflow job of
-- each job completed settles here, and the trigger workflow_jobs_settled releases what
-- waited for it, in this transaction.
settled as (
  update :RECORDS.workflow_jobs as workflow_jobs
  set state = 'completed', finished_at = now() /*:WORKFLOW_OUTPUT*/
  from completed /*:WORKFLOW_OUTPUTS*/
  where workflow_jobs.state = 'released' and workflow_jobs.job_id = completed.id
),
