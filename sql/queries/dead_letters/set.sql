-- Send the jobs of task $1 that fail for good to task $2, set by $3 (null: the database
-- role); replaces the task's dead letter. Row: when it was set.
insert into :RECORDS.dead_letters (task, target, set_by)
values ($1::text, $2::text, coalesce($3::text, current_user::text))
on conflict (task) do update set target = excluded.target, set_by = excluded.set_by, set_at = now()
returning dead_letters.set_at
