-- Flow control (docs/guide/flow-control.md): the pauses in force. A row pauses the jobs of
-- one task identifier (scope 'task'), of one named queue ('queue'), or every job ('all', its
-- name empty). Written by WorkerUtils::pause/resume (sql/queries/flow_pause.sql,
-- flow_resume.sql), which notify 'formica:flow'; every Formica worker reads the rows
-- (sql/queries/worker/read_flow.sql) before its first fetch, on that notification and every
-- poll interval, and leaves paused jobs out of its fetch. Kept here, not in graphile-worker's
-- schema: its workers neither see nor obey it.
create table :RECORDS.pauses (
  scope text not null check (scope in ('task', 'queue', 'all')),
  name text not null check ((scope = 'all') = (name = '')),
  reason text,
  paused_by text not null,
  paused_at timestamptz not null default now(),
  primary key (scope, name)
);
