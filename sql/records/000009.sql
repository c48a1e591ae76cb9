-- Claims of unique jobs that must not be added again within a period, finished or not
-- (`Unique::within`, core/src/unique.rs): one row per derived job key, held until `until`.
-- Written by the add's own statement (sql/queries/add_claimed.sql), so a claim commits or
-- rolls back with its job; the primary key makes concurrent adds of one key wait for each
-- other, and only the add that inserts the claim, or renews an expired one, adds the job.
-- Expired claims are deleted by later claimed adds, a few at a time (the index on `until`).
create table :RECORDS.unique_claims (
  key text primary key,
  until timestamptz not null
);
create index unique_claims_until on :RECORDS.unique_claims (until);
