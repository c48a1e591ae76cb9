-- Workflows, newest first: each with its state and its jobs counted per state (the view
-- workflow_states), and why it was cancelled. $1 only this state, $2 only this name, $3 at
-- most this many.
select states.id, states.name, states.created_at, states.cancelled_at, workflows.cancel_reason,
  states.state, states.total, states.waiting, states.released, states.completed, states.failed,
  states.cancelled
from :RECORDS.workflow_states as states
inner join :RECORDS.workflows as workflows on workflows.id = states.id
where ($1::text is null or states.state = $1::text)
  and ($2::text is null or states.name = $2::text)
order by states.id desc
limit $3::bigint
