-- The tables of schema $1 (unquoted) and their indexes, from the statistics and the
-- catalog: sizes, live and dead rows, vacuums, autovacuum's trigger point for the table,
-- and an estimate of each relation's size if it were packed (null where the statistics
-- cannot tell: a table never analyzed, an index never vacuumed). The estimate is the rows
-- (or index entries) times their average width from pg_stats, over a page's room at the
-- relation's fill factor; no page is read, so it is cheap on any table and only an
-- estimate.
with tables as (
  select c.oid, c.relname, c.reltuples, c.reloptions
  from pg_class as c join pg_namespace as n on n.oid = c.relnamespace
  where n.nspname = $1::text and c.relkind = 'r'
),
options as (
  select t.oid,
    (select o.option_value from pg_options_to_table(t.reloptions) as o where o.option_name = 'autovacuum_enabled') as enabled,
    (select o.option_value from pg_options_to_table(t.reloptions) as o where o.option_name = 'autovacuum_vacuum_threshold') as threshold,
    (select o.option_value from pg_options_to_table(t.reloptions) as o where o.option_name = 'autovacuum_vacuum_scale_factor') as scale,
    coalesce((select o.option_value from pg_options_to_table(t.reloptions) as o where o.option_name = 'fillfactor')::int, 100) as fillfactor
  from tables as t
),
widths as (
  -- Average stored width of each column, by attribute number.
  select t.oid, a.attnum, s.avg_width
  from tables as t
  join pg_attribute as a on a.attrelid = t.oid and a.attnum > 0 and not a.attisdropped
  join pg_stats as s on s.schemaname = $1::text and s.tablename = t.relname and s.attname = a.attname
)
select 'table' as kind, t.relname as name, t.relname as table_name,
  pg_relation_size(t.oid)::bigint as bytes,
  case when t.reltuples >= 0 and exists (select 1 from widths as w where w.oid = t.oid) then
    -- A heap row: a 24-byte header and its columns, padded to 8, and a 4-byte pointer.
    (ceil(t.reltuples * (24 + ceil((select sum(w.avg_width) from widths as w where w.oid = t.oid) / 8.0) * 8 + 4)
      / ((current_setting('block_size')::int - 24) * o.fillfactor / 100.0)) * current_setting('block_size')::int)::bigint
  end as packed_bytes,
  s.n_live_tup as live_rows, s.n_dead_tup as dead_rows,
  greatest(s.last_vacuum, s.last_autovacuum) as last_vacuum,
  s.last_autovacuum,
  extract(epoch from now() - greatest(s.last_vacuum, s.last_autovacuum))::float8 as vacuum_age_seconds,
  (coalesce(o.threshold::float8, current_setting('autovacuum_vacuum_threshold')::float8)
    + coalesce(o.scale::float8, current_setting('autovacuum_vacuum_scale_factor')::float8) * greatest(t.reltuples, 0))::bigint
    as autovacuum_threshold,
  (current_setting('autovacuum') = 'on' and coalesce(o.enabled::bool, true)) as autovacuum_enabled
from tables as t
join options as o on o.oid = t.oid
left join pg_stat_user_tables as s on s.relid = t.oid
union all
select 'index', ic.relname, t.relname,
  pg_relation_size(ic.oid)::bigint,
  case when ic.reltuples >= 0 then
    -- A leaf entry: an 8-byte header and its key and included columns (an expression
    -- counted as 8 bytes), padded to 8, and a 4-byte pointer; the pages beyond the leaves
    -- (the meta page, the inner pages) as one more page and a hundredth.
    ((ceil(ic.reltuples * (8 + ceil(coalesce((select sum(coalesce(w.avg_width, 8))
        from unnest(i.indkey) as k(attnum) left join widths as w on w.oid = t.oid and w.attnum = k.attnum), 8) / 8.0) * 8 + 4)
      / ((current_setting('block_size')::int - 24 - 16)
        * coalesce((select o.option_value from pg_options_to_table(ic.reloptions) as o where o.option_name = 'fillfactor')::int, 90) / 100.0))
      * 1.01 + 1) * current_setting('block_size')::int)::bigint
  end,
  null, null, null, null, null, null, null
from tables as t
join pg_index as i on i.indrelid = t.oid and i.indisvalid
join pg_class as ic on ic.oid = i.indexrelid
join pg_am as am on am.oid = ic.relam and am.amname = 'btree'
order by 1 desc, 2
