-- `$1` job id, `$2` step name: the output the step recorded when it finished (no row: it has
-- not finished yet).
select steps.output::text
from :RECORDS.job_steps as steps
where steps.job_id = $1::bigint and steps.name = $2::text
