-- Begins every fetch's transaction; the fetch and the commit follow in the same round trip,
-- so the transaction never waits on its client, unless the client stalls part way through
-- sending (a paused process, a cut network): the server then ends the session after 10 s
-- idle, freeing the jobs the fetch locked.
--
-- The settings give the fetch the plan that suits a table of any size, cached once (and
-- made again under them only when PostgreSQL drops it): the due jobs read in the order of
-- graphile-worker's main index (is_available, by priority and run_at), each found again by
-- its ctid. Left to itself, PostgreSQL may cache a generic plan after five fetches, and on
-- a small table (a quiet queue) that plan is a scan and a sort of the whole table: when a
-- burst of jobs then arrives, each fetch reads and sorts all of it until autovacuum's next
-- analyze of the table (bench/burst: 300,000 jobs in 75-77 s, against 4.4-5.5 s now).
-- Disabling a plan node only adds a huge cost to it, so JIT would take every fetch for an
-- expensive one: it is off.
begin;
set local idle_in_transaction_session_timeout = '10s';
set local plan_cache_mode = force_generic_plan;
set local enable_seqscan = off;
set local enable_sort = off;
set local jit = off;
