-- Begins a fetch's transaction in one of the two turns the Formica workers of one schema
-- share (advisory locks (:TURNS_KEY, 0) and (:TURNS_KEY, 1), held to the commit): the
-- first free one, else a wait for one drawn at random. Sent, pipelined, before a fetch
-- while other Formica workers are alive. Why: a fetch's snapshot is taken when it starts, so the jobs
-- another worker's fetch locked and committed since look free to it; FOR UPDATE SKIP
-- LOCKED then follows each to its newest version, locks it (WAL), finds it taken and skips
-- it, holding the lock until its commit. With at most two fetches at once, each starts
-- after the others' commits; graphile-worker's workers take no turn and are not slowed.
-- The fetch and the commit follow in the same round trip, so the transaction never waits on
-- its client, unless the client stalls part way through sending (a paused process, a cut
-- network): the server then ends the session after 10 s idle, freeing the turn.
begin;
set local idle_in_transaction_session_timeout = '10s';
select coalesce(
  (select true from generate_series(0, 1) as turns(turn)
   where pg_try_advisory_xact_lock(:TURNS_KEY, turns.turn) limit 1),
  pg_advisory_xact_lock(:TURNS_KEY, floor(random() * 2)::integer) is null)
