create schema if not exists :RECORDS;
create table if not exists :RECORDS.migrations (
  id int primary key,
  ts timestamptz default now() not null
);
