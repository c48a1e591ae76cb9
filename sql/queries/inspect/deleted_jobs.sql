-- Rows ever deleted from the jobs table (completed or removed jobs), per the statistics
-- collector: sampled over time, the difference is the throughput.
select coalesce(sum(n_tup_del), 0)::bigint as deleted
from pg_stat_user_tables
where schemaname = $1::text and relname = '_private_jobs'
