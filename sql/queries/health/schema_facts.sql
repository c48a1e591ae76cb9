-- The parts of schema $1 (unquoted) that graphile-worker's workers and Formica's rely on,
-- one fact a row, `<kind> <name>: <definition>`, with the schema's own name taken out so
-- that any schema compares with graphile-worker 0.18's (formica_sql::health::EXPECTED):
-- each index, each function's signature, and a digest of each function's body (spaces
-- folded, the schema and its records schema as Formica's migrations name them, quoted, put
-- back as `<schema>` and `<records>`).
select replace(fact, quote_ident($1::text) || '.', '') as fact from (
  select format('index %s: %s', c.relname, pg_get_indexdef(i.indexrelid)) as fact
  from pg_index as i
  join pg_class as c on c.oid = i.indexrelid
  join pg_namespace as n on n.oid = c.relnamespace
  where n.nspname = $1::text
  union all
  select format('function %s(%s): returns %s lang=%s volatile=%s strict=%s secdef=%s',
    p.proname, pg_get_function_arguments(p.oid), pg_get_function_result(p.oid), l.lanname,
    p.provolatile, p.proisstrict, p.prosecdef)
  from pg_proc as p
  join pg_namespace as n on n.oid = p.pronamespace
  join pg_language as l on l.oid = p.prolang
  where n.nspname = $1::text
  union all
  select format('body %s(%s): md5 %s', p.proname, pg_get_function_arguments(p.oid),
    md5(btrim(regexp_replace(
      replace(replace(p.prosrc, '"formica_' || replace($1::text, '"', '""') || '"', '<records>'),
        '"' || replace($1::text, '"', '""') || '"', '<schema>'),
      '\s+', ' ', 'g'))))
  from pg_proc as p
  join pg_namespace as n on n.oid = p.pronamespace
  where n.nspname = $1::text
) as facts(fact)
order by fact collate "C"
