-- The invalid indexes of schema $1 (unquoted) that a failed or cancelled `REINDEX INDEX
-- CONCURRENTLY` of index $2 left behind (`<name>_ccnew`, `<name>_ccnew1`...), to drop.
select c.relname as name
from pg_index as i
join pg_class as c on c.oid = i.indexrelid
join pg_namespace as n on n.oid = c.relnamespace
where n.nspname = $1::text and not i.indisvalid
  and c.relname ~ ('^' || regexp_replace($2::text, '([^a-zA-Z0-9_])', '\\\1', 'g') || '_ccnew[0-9]*$')
