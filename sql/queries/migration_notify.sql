-- $1 ids just applied: tells listening workers (graphile-worker exits on a breaking one).
select pg_notify('worker:migrate', json_build_object('migrationNumber', m.id, 'breaking', m.breaking)::text)
from :SCHEMA.migrations as m where m.id = any($1::int[]) order by m.id
