-- The complete graphile_worker schema as graphile-worker 0.18 leaves it after its
-- migrations 1 to 20, installed in one step on a database that has none of it.
-- Object names (the `1` suffixes included) match graphile-worker's exactly so either
-- tool accepts a database the other installed. The functions live in ../functions/.

create type :SCHEMA.job_spec as (
  identifier text,
  payload json,
  queue_name text,
  run_at timestamptz,
  max_attempts smallint,
  job_key text,
  priority smallint,
  flags text[]
);

create table :SCHEMA._private_tasks (
  id integer generated always as identity (sequence name :SCHEMA.tasks_id_seq),
  identifier text not null,
  constraint tasks_pkey primary key (id),
  constraint tasks_identifier_key unique (identifier),
  constraint tasks_identifier_check check (length(identifier) <= 128)
);

create table :SCHEMA._private_job_queues (
  id integer generated always as identity (sequence name :SCHEMA.job_queues_id_seq),
  queue_name text not null,
  locked_at timestamptz,
  locked_by text,
  is_available boolean generated always as (locked_at is null) stored not null,
  constraint job_queues_pkey1 primary key (id),
  constraint job_queues_queue_name_key unique (queue_name),
  constraint job_queues_queue_name_check check (length(queue_name) <= 128)
);

-- No foreign keys to tasks or queues, on purpose: they would slow every insert and fetch.
create table :SCHEMA._private_jobs (
  id bigint generated always as identity (sequence name :SCHEMA.jobs_id_seq1),
  job_queue_id integer,
  task_id integer not null,
  payload json default '{}'::json not null,
  priority smallint default 0 not null,
  run_at timestamptz default now() not null,
  attempts smallint default 0 not null,
  max_attempts smallint default 25 not null,
  last_error text,
  created_at timestamptz default now() not null,
  updated_at timestamptz default now() not null,
  key text,
  locked_at timestamptz,
  locked_by text,
  revision integer default 0 not null,
  flags jsonb,
  is_available boolean generated always as (locked_at is null and attempts < max_attempts) stored not null,
  constraint jobs_pkey1 primary key (id),
  constraint jobs_key_key1 unique (key),
  constraint jobs_key_check check (length(key) > 0 and length(key) <= 512),
  constraint jobs_max_attempts_check check (max_attempts >= 1)
);

-- The fetch walks one of these two partial indexes in (priority, run_at) order.
create index jobs_main_index on :SCHEMA._private_jobs
  using btree (priority, run_at) include (id, task_id, job_queue_id)
  where is_available = true;
create index jobs_no_queue_index on :SCHEMA._private_jobs
  using btree (priority, run_at) include (id, task_id)
  where is_available = true and job_queue_id is null;

create table :SCHEMA._private_known_crontabs (
  identifier text not null,
  known_since timestamptz not null,
  last_execution timestamptz,
  constraint known_crontabs_pkey primary key (identifier)
);

-- Row level security with no policy: only the owner (the worker's role) sees the rows.
alter table :SCHEMA._private_jobs enable row level security;
alter table :SCHEMA._private_job_queues enable row level security;
alter table :SCHEMA._private_tasks enable row level security;
alter table :SCHEMA._private_known_crontabs enable row level security;
