-- Job $1's payload sealed again under the newest key ($3), if no worker holds it and it is
-- still the payload read ($2): a job changed or locked meanwhile is left for the next run.
update :SCHEMA._private_jobs
set payload = $3::text::json, updated_at = now()
where id = $1::bigint and locked_at is null and payload::text = $2::text
returning id
