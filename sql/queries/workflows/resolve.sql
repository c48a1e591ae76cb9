-- One pass of the workflows' resolver (see resolve_workflows in sql/records/000011.sql), then,
-- under the same pass's lock, the signals' timeouts (time_out_workflow_signals, records step
-- 23): the jobs settled or timed out, null if another worker's pass was running.
select case when resolved.settled is null then null
  else resolved.settled + :RECORDS.time_out_workflow_signals() end
from (select :RECORDS.resolve_workflows() as settled offset 0) as resolved
