-- Runtime schedules: cron and interval items added, changed and removed while workers run
-- (WorkerUtils, `formica schedule`, the dashboard's Cron page), rather than fixed in a
-- worker's crontab. Each row is one item in its canonical line (a crontab line, or an
-- `@every` line), whose `?id=` is the identifier: the item's row in graphile-worker's
-- known_crontabs ledger, which keeps each slot scheduled once across the fleet as for
-- crontab items. Workers that take runtime schedules read the table at start, on each
-- `formica:schedules` notification (sent by every write) and every few seconds.
-- graphile-worker never reads it: its workers run the jobs, not the schedules.
create table :RECORDS.schedules (
  identifier text primary key,
  line text not null,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now()
);
