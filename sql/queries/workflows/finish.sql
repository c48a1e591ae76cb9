-- Settle the sub-workflow jobs of the workflows $1 whose every job has settled (see
-- finish_subworkflows in sql/records/000024.sql).
select :RECORDS.finish_subworkflows($1::bigint[])
