      and not exists (select from :RECORDS.bounds as bounds where bounds.task = any($1::text[]))
