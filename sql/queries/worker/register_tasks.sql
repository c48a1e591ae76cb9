-- $1 task identifiers: their ids, registering the missing ones. Rows inserted here come
-- from `inserted`; rows that existed come from the snapshot. An identifier inserted by a
-- concurrent session after our snapshot is in neither: the caller retries then.
with inserted as (
  insert into :SCHEMA._private_tasks as tasks (identifier)
  select identifier from unnest($1::text[]) as u(identifier)
  where not exists (select 1 from :SCHEMA._private_tasks as existing where existing.identifier = u.identifier)
  on conflict do nothing
  returning tasks.id, tasks.identifier
)
select id, identifier from inserted
union all
select tasks.id, tasks.identifier from :SCHEMA._private_tasks as tasks where tasks.identifier = any($1::text[])
