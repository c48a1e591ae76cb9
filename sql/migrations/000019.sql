-- Marker only: from here on jobs and queues are locked by a worker pool's id rather than
-- by a single worker's id. Breaking, so older workers refuse a database that has it.
select 1;
