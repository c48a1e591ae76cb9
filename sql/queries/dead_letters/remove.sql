-- Send the jobs of task $1 nowhere when they fail for good. Rows: one if it had a dead letter.
delete from :RECORDS.dead_letters as dead_letters where dead_letters.task = $1::text
returning dead_letters.task
