-- Make the crontab identifiers $1 known, with $2 (the scheduler's start) as known_since for
-- those that are new. Rows: the identifiers that were already known, with when they were
-- first known and last scheduled; an identifier missing from the rows is new, and new
-- items are not backfilled.
with registered as (
  insert into :SCHEMA._private_known_crontabs as known_crontabs (identifier, known_since)
  select identifier, $2::timestamptz from unnest($1::text[]) as specs(identifier)
  on conflict (identifier) do nothing
)
select known_crontabs.identifier, known_crontabs.known_since, known_crontabs.last_execution
from :SCHEMA._private_known_crontabs as known_crontabs
where known_crontabs.identifier = any($1::text[])
