-- Worker $1 runs crontab $2 (canonical text, null: none), the tasks $3, accepts the flags $4
-- (empty: any) and refuses the flags $5 (null: decided before each fetch): recorded on its
-- lease row, written only when something differs (the heartbeat just before it may have
-- made the row anew).
update :RECORDS.leases
set crontab = $2::text, tasks = $3::text[], accepted_flags = $4::text[], forbidden_flags = $5::text[]
where worker_id = $1::text
  and (crontab, tasks, accepted_flags, forbidden_flags)
    is distinct from ($2::text, $3::text[], $4::text[], $5::text[])
