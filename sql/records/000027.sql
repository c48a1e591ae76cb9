-- Deleting a sub-workflow alone (docs/guide/workflows.md, "Retention"; rule 11 of
-- core/src/workflow.rs). A sub-workflow's job stays released until every job of the
-- sub-workflow has settled: deleted before that, the sub-workflow would leave its job released
-- for ever, and what waits for it waiting. So delete_workflow refuses a workflow some
-- released job waits for ('held', naming that job and its workflow), and forced it first
-- fails that job ("its sub-workflow N was deleted") in its own transaction, which settles it
-- as any failure does (the settling trigger: its dependents cancelled or released by their
-- policy, and its own workflow's end settles the job holding that one).
--
-- The return type gains the job holding the workflow, so the function is dropped and made
-- anew; a caller of step 22's reads the columns it knew.
drop function :RECORDS.delete_workflow(bigint, boolean);
create function :RECORDS.delete_workflow(deleted bigint, force boolean)
returns table (state text, waiting integer, released integer, parent_workflow bigint, parent_job text)
language plpgsql set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
  waiting integer;
  released integer;
  holder record;
begin
  perform from :RECORDS.workflows as workflows where workflows.id = deleted for update;
  if not found then
    return query select 'missing', 0, 0, null::bigint, null::text;
    return;
  end if;
  -- Its jobs, then the job holding it: the order a settling of its last job locks them in,
  -- so one under way commits first (and settles that job itself), never a deadlock with it.
  perform from :RECORDS.workflow_jobs as jobs where jobs.workflow_id = deleted order by jobs.id for update;
  select jobs.id, jobs.workflow_id, jobs.name into holder
  from :RECORDS.workflow_jobs as jobs
  where jobs.subworkflow_id = deleted and jobs.state = 'released'
  for update;
  select (count(*) filter (where jobs.state = 'waiting'))::int,
    (count(*) filter (where jobs.state = 'released'))::int
  into waiting, released
  from :RECORDS.workflow_jobs as jobs where jobs.workflow_id = deleted;
  if not force and holder.id is not null then
    return query select 'held', waiting, released, holder.workflow_id, holder.name;
    return;
  end if;
  if waiting + released > 0 and not force then
    return query select 'unfinished', waiting, released, null::bigint, null::text;
    return;
  end if;
  if holder.id is not null then
    update :RECORDS.workflow_jobs as jobs
    set state = 'failed', finished_at = now(), last_error = format('its sub-workflow %s was deleted', deleted)
    where jobs.id = holder.id;
  end if;
  delete from :RECORDS.workflows as workflows where workflows.id = deleted;
  return query select 'deleted', waiting, released, holder.workflow_id, holder.name;
end
$$;
