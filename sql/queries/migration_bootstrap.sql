create schema if not exists :SCHEMA;
create table if not exists :SCHEMA.migrations (
  id int primary key,
  ts timestamptz default now() not null
);
alter table :SCHEMA.migrations add column if not exists breaking boolean not null default false;
