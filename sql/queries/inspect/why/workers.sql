-- Every Formica worker's lease (live, stopped, or lapsed and not yet swept), with what it runs
-- (records step 15) and whether it is alive by the database clock: a small table, read whole.
select leases.worker_id, leases.host, leases.pid, leases.expires_at, leases.stopped_at,
  leases.suspected_at, leases.expires_at > now() as alive,
  leases.tasks, leases.accepted_flags, leases.forbidden_flags
from :RECORDS.leases as leases
order by leases.worker_id
