-- Whether this session's role owns the jobs table of schema `$1` (or is a member of its
-- owner): what a vacuum of it needs, lest it vacuum nothing and warn each time.
select pg_catalog.pg_has_role(tables.relowner, 'USAGE') as owns
from pg_catalog.pg_class as tables
where tables.oid = pg_catalog.format('%I._private_jobs', $1::text)::regclass
