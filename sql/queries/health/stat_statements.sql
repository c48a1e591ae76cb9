-- Where pg_stat_statements is installed in this database (its schema), if it is.
select n.nspname as schema
from pg_extension as e join pg_namespace as n on n.oid = e.extnamespace
where e.extname = 'pg_stat_statements'
