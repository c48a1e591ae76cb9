-- Lock up to $5 runnable jobs for worker $1: available, due by $4 (null: the database
-- clock), of the task identifiers $2 (their ids looked up once per statement, so a task
-- row deleted and added again is still found), without any of the flags $3, with one of
-- the flags $6 unless $6 is empty (a job without flags has none of them), and in a
-- named queue only if no one holds that queue; at most one job per named queue. The
-- candidates read which queues are free without locking them; only the queues of the
-- jobs chosen are locked (skip locked, so a queue another fetch took meanwhile is left to
-- it, with its job): locking every free queue would cost a row lock each per fetch. Each
-- job's attempts count the attempt now starting; it is locked at the later of $4 and the
-- database clock, so that no write after the lock is dated before it (return_jobs.sql
-- compares updated_at with it). Rows: _private_jobs columns plus task_identifier and
-- queue_name, in (priority, run_at, id) order. The candidates are found in one scan
-- (get_jobs_scan.sql) or one priority at a time (get_jobs_walk.sql), put in place of the
-- first marker; the comments of the last select mark where the traced fetch adds each job's
-- trace context (formica_sql::worker::get_jobs fills them).
/*:CANDIDATES*/,
chosen as (
  -- A queue may hold several candidates: keep its first, leave the rest untouched. Ties go
  -- by id: a job given back (its row rewritten) sorts after its equals in the index, yet
  -- keeps its place in its queue. (Ordering the candidates' scan by id too would read every
  -- job tied at the limit, all of one add_jobs call: bench/drain-cpu took 3 times as long.)
  select distinct on (candidates.job_queue_id, case when candidates.job_queue_id is null then candidates.id end)
    candidates.ctid, candidates.job_queue_id
  from candidates
  order by candidates.job_queue_id, case when candidates.job_queue_id is null then candidates.id end,
    candidates.priority, candidates.run_at, candidates.id
),
taken_queues as (
  select job_queues.id from :SCHEMA._private_job_queues as job_queues
  where job_queues.id in (select chosen.job_queue_id from chosen) and job_queues.is_available = true
  for update skip locked
),
locked_queues as (
  update :SCHEMA._private_job_queues as job_queues
  set locked_by = $1::text, locked_at = greatest($4::timestamptz, now())
  where job_queues.id in (select taken_queues.id from taken_queues)
),
locked as (
  update :SCHEMA._private_jobs as jobs
  set attempts = jobs.attempts + 1, locked_by = $1::text, locked_at = greatest($4::timestamptz, now())
  where jobs.ctid = any(array(
    select chosen.ctid from chosen
    where chosen.job_queue_id is null or chosen.job_queue_id in (select taken_queues.id from taken_queues)))
  returning jobs.*
)
select locked.*, tasks.identifier as task_identifier, job_queues.queue_name /*:TRACE_COLUMNS*/
from locked
inner join :SCHEMA._private_tasks as tasks on tasks.id = locked.task_id
left join :SCHEMA._private_job_queues as job_queues on job_queues.id = locked.job_queue_id
/*:TRACE_JOIN*/
order by locked.priority, locked.run_at, locked.id
