-- The bounds in force: rows (task, max_waiting, wait_ms, partition_kind, partition_arg,
-- set_by, set_at).
select bounds.task, bounds.max_waiting, bounds.wait_ms, bounds.partition_kind, bounds.partition_arg,
  bounds.set_by, bounds.set_at
from :RECORDS.bounds as bounds
order by bounds.task
