-- Waits, in a fetch's transaction (after fetch_begin.sql), for one of the two turns the
-- Formica workers of one schema share (advisory locks (key, 0) and (key, 1), the key one per schema,
-- held to the commit): the first free one, else a wait for one drawn at random. Sent,
-- pipelined, before a fetch while other Formica workers are alive. Why: a fetch's snapshot
-- is taken when it starts, so the jobs another worker's fetch locked and committed since
-- look free to it; FOR UPDATE SKIP LOCKED then follows each to its newest version, locks it
-- (WAL), finds it taken and skips it, holding the lock until its commit. With at most two
-- fetches at once, each starts after the others' commits; graphile-worker's workers take no
-- turn and are not slowed. A client stalled part way through sending frees its turn as it
-- frees its jobs (fetch_begin.sql).
select coalesce(
  (select true from generate_series(0, 1) as turns(turn)
   where pg_try_advisory_xact_lock(/*:TURNS_KEY*/, turns.turn) limit 1),
  pg_advisory_xact_lock(/*:TURNS_KEY*/, floor(random() * 2)::integer) is null)
