-- The flow controls in force: rows (kind, scope or null, name, max_running or max_starts,
-- partition kind, partition argument, period_ms or null, weights as JSON text or null):
-- 'pause' rows, then 'limit' rows, then 'fair' rows, then 'cap' rows. A handful of rows at
-- most, read by each worker at start, on 'formica:flow' and every poll interval: nothing on
-- the fetch's path.
select 'pause' as kind, pauses.scope, pauses.name, null::int as max_running,
  null::text as partition_kind, null::text as partition_arg, null::int as period_ms, null::text as weights
from :RECORDS.pauses as pauses
union all
select 'cap', null, caps.task, caps.max_running, caps.partition_kind, caps.partition_arg, null, null
from :RECORDS.caps as caps
union all
select 'limit', null, l.task, l.max_starts, l.partition_kind, l.partition_arg, l.period_ms, null
from :RECORDS.rate_limits as l
union all
select 'fair', null, f.task, null, f.partition_kind, f.partition_arg, null, f.weights::text
from :RECORDS.fair_shares as f
order by 1 desc, 2, 3, 5, 6
