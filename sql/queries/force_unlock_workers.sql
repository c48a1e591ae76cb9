-- $1 worker (pool) ids.
select :SCHEMA.force_unlock_workers($1::text[])
