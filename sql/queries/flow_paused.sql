-- The pauses in force, with why, by whom and since when: rows (scope, name, reason,
-- paused_by, paused_at), oldest first.
select pauses.scope, pauses.name, pauses.reason, pauses.paused_by, pauses.paused_at
from :RECORDS.pauses as pauses
order by pauses.paused_at, pauses.scope, pauses.name
