-- The flow controls in force: rows (kind, scope or null, name, max_running, partition
-- kind, partition argument): 'pause' rows then 'cap' rows. A handful of rows at most, read
-- by each worker at start, on 'formica:flow' and every poll interval: nothing on the
-- fetch's path.
select 'pause' as kind, pauses.scope, pauses.name, null::int as max_running,
  null::text as partition_kind, null::text as partition_arg
from :RECORDS.pauses as pauses
union all
select 'cap', null, caps.task, caps.max_running, caps.partition_kind, caps.partition_arg
from :RECORDS.caps as caps
order by 1 desc, 2, 3
