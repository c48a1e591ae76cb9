-- No function of the records schema JIT-compiles its statements. PostgreSQL compiles a plan
-- whose estimated cost passes jit_above_cost (100,000) at every execution, and a cached plan
-- does not keep the compiled code. The resolver's pass (every 2 s on each worker) crossed it
-- once some thousands to tens of thousands of workflow jobs were released (by the
-- statistics of the moment): its look-up of each one's history is estimated at some 60 a
-- job. It then spent 0.15 to 1.3 s of the server's CPU compiling, each pass, for a look-up of
-- some tens of milliseconds (`WORKFLOW=fan:10 bench/drain-cpu 20000` under auto_explain;
-- `bench/resolve-cost`). The functions that disable sequential scans are as exposed: a
-- disabled node only adds a huge cost to the plan, as the fetch's comment says
-- (sql/queries/worker/fetch_begin.sql, which turns JIT off for the same reason).
--
-- So every PL/pgSQL function, and every SQL function that has settings of its own (never
-- inlined), runs with jit off, whoever calls it. Left as they are: a SQL function without
-- settings (a setting would stop PostgreSQL from inlining it into its caller), and the
-- controlled fetch's two functions, which run only in the fetch's transaction, where jit is
-- already off, one of them once a job (a setting adds its own work to every call). A later step
-- that redefines one of these functions states `set jit = off` with its other settings
-- (tests/tests/schema.rs checks every one).
do $$
declare
  f record;
begin
  for f in
    select functions.proname, pg_get_function_identity_arguments(functions.oid) as arguments
    from pg_proc as functions
    join pg_language as languages on languages.oid = functions.prolang
    where functions.pronamespace = ':RECORDS'::regnamespace
      and (languages.lanname = 'plpgsql' or (languages.lanname = 'sql' and functions.proconfig is not null))
      and functions.proname not in ('lock_jobs_controlled', 'fetched_names')
  loop
    execute format('alter function :RECORDS.%I(%s) set jit = off', f.proname, f.arguments);
  end loop;
end
$$;
