-- `$1` job id, completed in this transaction with history off: its steps go with it.
delete from :RECORDS.job_steps as steps where steps.job_id = $1::bigint
