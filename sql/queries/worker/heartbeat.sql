-- Worker $1 is alive for $2 more milliseconds by the database clock (and not suspected).
insert into :RECORDS.leases as leases (worker_id, expires_at)
values ($1::text, now() + $2::bigint * interval '1 millisecond')
on conflict (worker_id) do update set expires_at = excluded.expires_at, suspected_at = null
