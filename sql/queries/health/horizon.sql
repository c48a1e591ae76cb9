-- What holds back vacuum's horizon in this database, oldest first: sessions with a snapshot
-- or a transaction id (this one left out), prepared transactions, and replication slots
-- (a physical slot's xmin comes from its standby's feedback; any slot that nobody reads
-- keeps its WAL). Catalog views only: nothing is locked or scanned. Ages are in seconds
-- (null where PostgreSQL keeps no time, as for slots) and in transactions.
with now_lsn as (
  select case when pg_is_in_recovery() then pg_last_wal_replay_lsn() else pg_current_wal_lsn() end as lsn
)
select 'session' as kind, a.pid::text as holder, a.pid, a.application_name, a.state,
  a.backend_type, left(a.query, 200) as query,
  extract(epoch from now() - coalesce(a.xact_start, a.query_start))::float8 as age_seconds,
  greatest(age(a.backend_xmin), age(a.backend_xid))::bigint as xid_age,
  null::bigint as retained_wal_bytes
from pg_stat_activity as a
where a.pid <> pg_backend_pid()
  and (a.backend_xmin is not null or a.backend_xid is not null)
  and (a.datname = current_database() or a.backend_type = 'walsender')
union all
select 'prepared', p.gid, null, null, 'prepared', null, null,
  extract(epoch from now() - p.prepared)::float8, age(p.transaction)::bigint, null
from pg_prepared_xacts as p
where p.database = current_database()
union all
select 'slot', s.slot_name, s.active_pid, null, case when s.active then 'active' else 'inactive' end,
  s.slot_type, null, null,
  greatest(age(s.xmin), age(s.catalog_xmin))::bigint,
  pg_wal_lsn_diff((select lsn from now_lsn), s.restart_lsn)::bigint
from pg_replication_slots as s
where s.database is null or s.database = current_database()
order by xid_age desc nulls last, age_seconds desc nulls last
