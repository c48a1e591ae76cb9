-- Worker $1 runs crontab $2 (canonical text): recorded on its lease row, written only when
-- it differs (the heartbeat just before it may have made the row anew).
update :RECORDS.leases set crontab = $2::text
where worker_id = $1::text and crontab is distinct from $2::text
