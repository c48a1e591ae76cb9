-- Notifications move from a statement trigger on _private_jobs into the functions that
-- add and remove jobs (which are (re)created after this file), so the payload can carry
-- the number of jobs. The trigger's name was never part of the contract: drop whatever
-- user-level trigger graphile-worker left on the table, and its function.
do $$
declare
  t record;
begin
  for t in
    select tg.tgname, tg.tgfoid::regprocedure as fn
    from pg_trigger tg
    where tg.tgrelid = ':SCHEMA._private_jobs'::regclass and not tg.tgisinternal
  loop
    execute format('drop trigger %I on :SCHEMA._private_jobs', t.tgname);
    execute format('drop function if exists %s', t.fn);
  end loop;
end
$$;
