-- Added to sql/queries/worker/fail_jobs.sql where the jobs failed include workflow jobs (the
-- driver knows them by their flag, docs/guide/workflows.md): the workflow job of each job
-- this leaves out of attempts settles here, failed (cancelled: Formica's cancel), and the
-- trigger workflow_jobs_settled cancels or releases what waited for it, in this transaction.
settled as (
  update :RECORDS.workflow_jobs as workflow_jobs
  set state = case when failed.error like 'cancelled: %' then 'cancelled' else 'failed' end,
    finished_at = now(), last_error = failed.error
  from failed
  where workflow_jobs.state = 'released' and workflow_jobs.job_id = failed.id and failed.exhausted
),
