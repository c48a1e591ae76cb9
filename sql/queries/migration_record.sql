-- $1 ids, $2 their breaking flags. Inserting the ledger rows first makes a concurrent
-- migrator wait on the primary key and then fail with 23505: it skips what we apply.
insert into :SCHEMA.migrations (id, breaking)
select * from unnest($1::int[], $2::bool[])
