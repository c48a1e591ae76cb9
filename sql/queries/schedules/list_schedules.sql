-- The runtime schedules, by identifier, with their ledger row in known_crontabs.
select schedules.identifier, schedules.line, schedules.created_at, schedules.updated_at
  , known_crontabs.last_execution
from :RECORDS.schedules as schedules
left join :SCHEMA._private_known_crontabs as known_crontabs on known_crontabs.identifier = schedules.identifier
order by schedules.identifier
