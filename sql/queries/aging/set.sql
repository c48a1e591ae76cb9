-- Age the jobs of task $1: every $2 milliseconds ready, their priority number falls by $3,
-- down to $4; set by $5 (null: the database role); replaces the task's aging. Row: when it
-- was set. The workers' chore reads it at its next pass.
insert into :RECORDS.aging (task, every_ms, step, best, set_by)
values ($1::text, $2::int, $3::smallint, $4::smallint, coalesce($5::text, current_user::text))
on conflict (task) do update set every_ms = excluded.every_ms, step = excluded.step,
  best = excluded.best, set_by = excluded.set_by, set_at = now(), passed_at = null
returning aging.set_at
