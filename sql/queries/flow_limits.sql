-- The rate limits in force: rows (task, max_starts, period_ms, partition_kind, partition_arg,
-- set_by, set_at), by task, the whole task's first.
select l.task, l.max_starts, l.period_ms, l.partition_kind, l.partition_arg, l.set_by, l.set_at
from :RECORDS.rate_limits as l
order by l.task, l.partition_kind nulls first, l.partition_arg
