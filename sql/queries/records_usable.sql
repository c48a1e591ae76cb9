-- Whether this role can use a table of the records schema: the schema (named $2) exists and
-- is usable, and the table ($1, quoted) exists (an older Formica may have migrated the
-- records only to before the step that made it; a database graphile-worker migrated has no
-- records schema at all) with the privileges $3 ('insert, update' to record trace contexts,
-- 'select' to keep bounds). Each test only if the one before passed (a case runs its
-- branches in order): the later ones fail on what is missing.
select case
  when not exists (select 1 from pg_catalog.pg_namespace where nspname = $2::text) then false
  when not has_schema_privilege($2::text, 'usage') then false
  when to_regclass($1::text) is null then false
  else has_table_privilege($1::text, $3::text)
end
