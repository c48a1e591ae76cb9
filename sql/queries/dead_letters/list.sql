-- The dead letters: rows (task, target, set_by, set_at, sent, last_job_id, last_sent_at),
-- the last three null until one of its jobs was sent.
select dead_letters.task, dead_letters.target, dead_letters.set_by, dead_letters.set_at,
  sends.sent, sends.last_job_id, sends.last_sent_at
from :RECORDS.dead_letters as dead_letters
left join :RECORDS.dead_letter_sends as sends on sends.task = dead_letters.task
order by dead_letters.task
