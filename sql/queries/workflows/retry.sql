-- Run the failed jobs of the workflow $1 again, and put back to wait those cancelled because
-- of a dependency: see retry_workflow in sql/records/000011.sql. Row: the workflow's state
-- ('missing', 'cancelled': refused, 'retried'), the workflow job ids run again and waiting again.
select retried.state, retried.rerun, retried.rewaiting from :RECORDS.retry_workflow($1::bigint) as retried
