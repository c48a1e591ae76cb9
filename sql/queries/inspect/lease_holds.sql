-- Whether worker $1's lease holds by the database clock (no row: it has none).
select leases.expires_at > now() as holds from :RECORDS.leases as leases where leases.worker_id = $1::text
