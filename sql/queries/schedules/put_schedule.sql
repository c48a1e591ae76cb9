-- Add the runtime schedule $1 (identifier) with the canonical line $2, or replace the line
-- of the one with that identifier, and wake the workers that take runtime schedules.
-- Rows: whether it was new.
with put as (
  insert into :RECORDS.schedules as schedules (identifier, line) values ($1::text, $2::text)
  on conflict (identifier) do update set line = excluded.line, updated_at = now()
  returning (xmax = 0) as added
)
select put.added, pg_notify('formica:schedules', '') is not null as notified from put
