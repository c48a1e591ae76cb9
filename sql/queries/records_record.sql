-- $1 the id applied (a concurrent migrator waits on the key, then fails with 23505).
insert into :RECORDS.migrations (id) values ($1::int)
