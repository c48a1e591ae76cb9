-- The fairness in force: rows (task, weights as JSON text, partition_kind, partition_arg,
-- set_by, set_at), by task.
select shares.task, shares.weights::text as weights, shares.partition_kind, shares.partition_arg,
  shares.set_by, shares.set_at
from :RECORDS.fair_shares as shares
order by shares.task
