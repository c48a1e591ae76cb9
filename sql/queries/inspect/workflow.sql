-- One workflow as workflows.sql gives it. $1 its id.
select states.id, states.name, states.created_at, states.cancelled_at, workflows.cancel_reason,
  states.state, states.total, states.waiting, states.released, states.completed, states.failed,
  states.cancelled
from :RECORDS.workflow_states as states
inner join :RECORDS.workflows as workflows on workflows.id = states.id
where states.id = $1::bigint
