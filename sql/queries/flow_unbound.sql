-- Lift the bound of task $1. Rows: one if there was.
delete from :RECORDS.bounds as bounds where bounds.task = $1::text returning bounds.task
