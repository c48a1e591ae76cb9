-- The agings in force: rows (task, every_ms, step, best, set_by, set_at), by task.
select aging.task, aging.every_ms, aging.step, aging.best, aging.set_by, aging.set_at
from :RECORDS.aging as aging
order by aging.task
