-- The caps in force: rows (task, max_running, partition_kind, partition_arg, set_by, set_at),
-- by task, the whole task's first.
select caps.task, caps.max_running, caps.partition_kind, caps.partition_arg, caps.set_by, caps.set_at
from :RECORDS.caps as caps
order by caps.task, caps.partition_kind nulls first, caps.partition_arg
