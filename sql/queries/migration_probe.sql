-- The server version, the newest migration applied and the newest breaking one.
select current_setting('server_version_num')::int as server_version_num,
  (select id from :SCHEMA.migrations order by id desc limit 1) as latest,
  (select id from :SCHEMA.migrations where breaking order by id desc limit 1) as latest_breaking
