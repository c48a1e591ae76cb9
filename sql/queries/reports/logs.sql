-- The log lines of jobs that one worker gathered since its last write: $1 job ids, $2
-- attempts, $3 places in their attempt's log, $4 times, $5 levels, $6 messages. One
-- statement for every line.
insert into :RECORDS.job_logs (job_id, attempt, line, at, level, message)
select * from unnest($1::bigint[], $2::smallint[], $3::int[], $4::timestamptz[], $5::text[], $6::text[])
