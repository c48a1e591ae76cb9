-- The capped and the rate-limited fetch (records migrations 6 and 10) lock at the later of
-- the worker's clock and the database's, as the plain fetch does: under use_local_time a
-- worker's clock may be behind, and a lock dated before the job's last update made the job
-- look replaced while held, so given back on its last attempt it was not refunded (a job
-- lost). return_jobs.sql says why the lock time matters. Each function is redefined from
-- its own text with that one change, so the rest of it stays as its migration wrote it.
do $$
declare
  fetch_function regprocedure;
  definition text;
  dated_by_the_worker constant text := 'locked_at = coalesce(due_by, now())';
begin
  foreach fetch_function in array
    array[':RECORDS.lock_jobs_capped'::regproc, ':RECORDS.lock_jobs_limited'::regproc]
  loop
    definition := pg_get_functiondef(fetch_function);
    -- A named queue's lock and a job's.
    if array_length(string_to_array(definition, dated_by_the_worker), 1) <> 3 then
      raise exception 'records migration 12: % is not as migrations 6 and 10 left it', fetch_function;
    end if;
    execute replace(definition, dated_by_the_worker, 'locked_at = greatest(due_by, now())');
  end loop;
end
$$;
