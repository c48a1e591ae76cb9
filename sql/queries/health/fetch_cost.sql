-- The workers' fetches as pg_stat_statements counts them in this database: the plain
-- fetch of the jobs table $1 (quoted, schema-qualified: it counts the attempt as it locks)
-- and the controlled one (a call of the function $2, lock_jobs_controlled in the records
-- schema). pg_stat_statements keeps the text with its constants as parameters (`+ 1` is
-- `+ $22`). Totals since the statistics were last reset. :STATEMENTS is the view, in the
-- schema the extension was installed in.
select coalesce(sum(s.calls), 0)::bigint as calls,
  coalesce(sum(s.total_exec_time), 0)::float8 as total_ms,
  coalesce(sum(s.shared_blks_hit + s.shared_blks_read), 0)::bigint as buffers,
  coalesce(sum(s.rows), 0)::bigint as rows
from :STATEMENTS as s
where s.dbid = (select d.oid from pg_database as d where d.datname = current_database())
  and ((strpos(s.query, $1::text) > 0 and strpos(s.query, 'set attempts = jobs.attempts + $') > 0)
    or strpos(s.query, $2::text || '(') > 0)
  -- Not the migrations that created the functions holding the same text.
  and strpos(lower(s.query), 'create function') = 0 and strpos(lower(s.query), 'create or replace function') = 0
