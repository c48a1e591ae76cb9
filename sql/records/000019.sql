-- Dead letters (docs/guide/dead-letters.md): the task each task's jobs are sent to when they
-- fail for good (`target`), set from the API, the CLI or the dashboard; and, per task, how
-- many were sent and the last job that received one (written by the failure that sends it).
create table :RECORDS.dead_letters (
  task text primary key,
  target text not null check (target <> task),
  set_by text not null,
  set_at timestamptz not null default now()
);

create table :RECORDS.dead_letter_sends (
  task text primary key,
  sent bigint not null,
  last_job_id bigint not null,
  last_sent_at timestamptz not null
);
