-- Cron items this database has seen, with the slot each last ran for.
select identifier, known_since, last_execution
from :SCHEMA._private_known_crontabs
order by identifier
