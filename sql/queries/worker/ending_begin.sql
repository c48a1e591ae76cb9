-- Begins the transaction of a statement that ends jobs (a completion, a failure): the
-- statement and the commit follow in the same round trip, as a fetch's do.
--
-- The setting gives the statement its generic plan, cached once. Left to itself, PostgreSQL
-- plans a prepared statement anew at every call for as long as a plan made for the call's
-- values looks cheaper than the generic one, and with the jobs' ids an array whose length
-- it then knows, it always does: with one job a statement (any worker not under load, whose
-- batches hold one job), planning a completion cost more than running it (plain jobs 280
-- against 264 us a job, a workflow's settling completion 364 against 894:
-- `COMPLETE_BATCH_MS=-1 bench/drain-cpu 10000` with pg_stat_statements' track_planning).
-- The generic plan goes by the primary key, as the others did.
begin;
set local plan_cache_mode = force_generic_plan;
