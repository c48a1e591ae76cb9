-- Workflows (docs/guide/workflows.md): sets of jobs added together, where a job may wait for
-- others of its set. A job with nothing to wait for is added to graphile_worker's jobs at
-- once; the others wait here, as rows of workflow_jobs, and are added (released) only when
-- what they wait for has settled, so graphile-worker's workers never see a job that is not
-- released. The rules (what releases, cancels or fires a job) are core/src/workflow.rs's;
-- this schema applies them, and tests/tests/workflow_differential.rs compares the two.

create table :RECORDS.workflows (
  id bigint generated always as identity primary key,
  name text not null,
  created_at timestamptz not null default now(),
  -- Set by cancel_workflow: nothing of the workflow is released after it.
  cancelled_at timestamptz,
  cancel_reason text
);

create table :RECORDS.workflow_jobs (
  id bigint generated always as identity primary key,
  workflow_id bigint not null references :RECORDS.workflows (id) on delete cascade,
  -- Unique in its workflow: how dependencies, callbacks' outputs and users name it.
  name text not null,
  -- The job to add when released (graphile_worker.add_job's arguments; no job key: a key
  -- would let another add replace or remove the job behind the workflow's back).
  task_identifier text not null,
  payload json not null,
  queue_name text,
  run_at timestamptz,
  max_attempts smallint,
  priority smallint,
  flags text[],
  -- When a job it depends on fails for good or is cancelled: it is cancelled ('cancel') or
  -- still released once all it depends on has settled ('release').
  on_dependency_failure text not null default 'cancel'
    check (on_dependency_failure in ('cancel', 'release')),
  -- A batch callback: released once all it depends on has settled ('all_finished'), or at the
  -- first of them to fail for good ('first_failure'), its payload given the counts and
  -- outputs of what it depends on. Null: an ordinary job.
  callback text check (callback in ('all_finished', 'first_failure')),
  state text not null
    check (state in ('waiting', 'released', 'completed', 'failed', 'cancelled')),
  -- How many of the jobs it depends on have not settled yet (a waiting job is released when
  -- this reaches 0): a counter each settling decrements under the row's lock, so two
  -- dependencies settling at once on two workers both count, and only one releases it.
  pending integer not null check (pending >= 0),
  -- The graphile_worker job while released (and the last one after it settled).
  job_id bigint,
  -- What the handler returned (a Formica worker that writes history), for callbacks.
  output json,
  last_error text,
  released_at timestamptz,
  finished_at timestamptz,
  unique (workflow_id, name)
);
-- The jobs that may still settle, by their graphile_worker job: what a completion, a
-- failure and the resolver look up.
create index workflow_jobs_released on :RECORDS.workflow_jobs (job_id) where state = 'released';

create table :RECORDS.workflow_dependencies (
  job bigint not null references :RECORDS.workflow_jobs (id) on delete cascade,
  depends_on bigint not null references :RECORDS.workflow_jobs (id) on delete cascade,
  primary key (depends_on, job)
);
create index workflow_dependencies_job on :RECORDS.workflow_dependencies (job);

-- A workflow's state, from its jobs': cancelled once cancel_workflow ran; running while a
-- job waits or is released; completed when every job completed; failed otherwise.
create view :RECORDS.workflow_states as
select workflows.id, workflows.name, workflows.created_at, workflows.cancelled_at,
  case
    when workflows.cancelled_at is not null then 'cancelled'
    when counts.waiting + counts.released > 0 then 'running'
    when counts.completed = counts.total then 'completed'
    else 'failed'
  end as state,
  counts.total, counts.waiting, counts.released, counts.completed, counts.failed, counts.cancelled
from :RECORDS.workflows as workflows
cross join lateral (
  select count(*)::int as total,
    (count(*) filter (where jobs.state = 'waiting'))::int as waiting,
    (count(*) filter (where jobs.state = 'released'))::int as released,
    (count(*) filter (where jobs.state = 'completed'))::int as completed,
    (count(*) filter (where jobs.state = 'failed'))::int as failed,
    (count(*) filter (where jobs.state = 'cancelled'))::int as cancelled
  from :RECORDS.workflow_jobs as jobs
  where jobs.workflow_id = workflows.id
) as counts;
