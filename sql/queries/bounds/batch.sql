where (
  -- The batch's bounded tasks make room or the statement fails (:RECORDS.make_room, after
  -- add_jobs stored the jobs: all or nothing); with no bound at all, one look at the bounds.
  select count(*) from (
    select :RECORDS.make_room(array(select added.id from added)) where exists (select from :RECORDS.bounds)
  ) as room) >= 0
