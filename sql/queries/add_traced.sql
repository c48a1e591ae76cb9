-- An add statement (add_job.sql, add_jobs.sql or add_jobs_plain.sql, in place of the
-- marker ADD) that also records the W3C trace context it ran in for each job it
-- answers with (the two parameters after the add's own). One statement, so the context
-- commits or rolls back with the jobs. A job key that brought back an existing job gives it
-- the newest context. Rows: the add's, in id order (the order each add answers in).
with added as (
/*:ADD*/
),
traced as (
  insert into :RECORDS.job_traces (job_id, traceparent, tracestate)
  select added.id, /*:TRACEPARENT*/::text, /*:TRACESTATE*/::text from added
  on conflict (job_id) do update set traceparent = excluded.traceparent, tracestate = excluded.tracestate
)
select added.* from added order by added.id
