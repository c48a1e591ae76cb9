-- How many jobs the filter picks now (a bulk action's dry run): a plain read, no row locked.
select count(*) as matching from (/*:MATCHING*/) as matching
