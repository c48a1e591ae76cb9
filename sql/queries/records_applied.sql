-- The ids of the records' migrations applied.
select id from :RECORDS.migrations order by id
