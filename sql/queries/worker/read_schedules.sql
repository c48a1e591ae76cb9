-- The runtime schedules a worker schedules beside its crontab: identifier and line.
select identifier, line from :RECORDS.schedules order by identifier
