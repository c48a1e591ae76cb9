  -- The add's bounded task makes room or the statement fails (:RECORDS.make_room); an
  -- unbounded one costs a probe of the bounds' primary key.
  and (select count(*) from :RECORDS.bounds as bounds
       where bounds.task = $1::text and :RECORDS.make_room(array[jobs.id])) >= 0
