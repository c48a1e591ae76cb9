-- Formica's own records, beside graphile-worker's schema (never in it): which Formica
-- workers are alive, until when, and since when one whose lease lapsed is suspected dead
-- (all by the database clock).
create table :RECORDS.leases (
  worker_id text primary key,
  expires_at timestamptz not null,
  suspected_at timestamptz
);
