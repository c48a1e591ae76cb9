-- Bound task $1 at $2 waiting jobs, an add over it waiting up to $3 milliseconds for room (0:
-- refused at once), per partition ($4 'field' or 'key_prefix' with its argument $5; nulls:
-- the whole task), set by $6 (null: the database role); replaces the task's bound. Only
-- Formica's add statements read it, in the add itself: no notification. Row: when it was set.
insert into :RECORDS.bounds as bounds (task, max_waiting, wait_ms, partition_kind, partition_arg, set_by)
values ($1::text, $2::int, $3::int, $4::text, $5::text, coalesce($6::text, current_user::text))
on conflict (task) do update set max_waiting = excluded.max_waiting, wait_ms = excluded.wait_ms,
  partition_kind = excluded.partition_kind, partition_arg = excluded.partition_arg,
  set_by = excluded.set_by, set_at = now()
returning bounds.set_at
