-- `$1` job id, completed in this transaction with history on: its steps move into the history
-- row the completion just wrote (`job_history.steps`, name to output), kept and pruned with it.
with finished as (
  delete from :RECORDS.job_steps as steps where steps.job_id = $1::bigint
  returning steps.name, steps.output
)
update :RECORDS.job_history as history
set steps = (select json_object_agg(finished.name, finished.output) from finished)
where history.job_id = $1::bigint and history.outcome = 'completed'
  and exists (select from finished)
