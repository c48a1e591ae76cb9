-- One pass of the workflows' resolver (see resolve_workflows in sql/records/000011.sql): the
-- jobs settled, null if another worker's pass was running.
select :RECORDS.resolve_workflows()
