# shellcheck shell=bash
# Sourced by the bench scripts that drain workflows (drain-cpu, settle-cost, resolve-cost):
# the shapes they add, and the completion they settle them with, the worker's own.

# Sets `per` (jobs a workflow), `released` (jobs released by settling), `edges` (dependencies
# counted down) and `depends_on` (the SQL of job i's dependencies) for shape $1: chain:L
# (chains of L jobs, each waiting for the one before) or fan:K (K jobs, then one waiting for
# all of them). Fails on any other shape.
workflow_shape() {
  local size=${1#*:}
  case ${1%%:*} in
    chain) per=$size released=$((size - 1)) edges=$((size - 1))
      depends_on="case when i > 1 then json_build_array('j' || (i - 1)) else '[]' end" ;;
    fan) per=$((size + 1)) released=1 edges=$size
      depends_on="case when i > $size then (select json_agg('j' || k) from generate_series(1, $size) as k) else '[]' end" ;;
    *) echo "the workflow shape is chain:L or fan:K, not '$1'" >&2; return 1 ;;
  esac
}

# The statement adding $1 workflows of the shape `workflow_shape` set, in one statement.
add_workflows_sql() {
  echo "with spec as (
      select json_agg(json_build_object('name', 'j' || i, 'task_identifier', 'noop', 'payload', '{}'::json,
        'depends_on', $depends_on) order by i) as jobs
      from generate_series(1, $per) as i)
    select count(*) from spec, generate_series(1, $1) as n,
      lateral formica_graphile_worker.add_workflow('bench ' || n, spec.jobs)"
}

# A block completing the queued jobs, lowest ids first, $2 at a time (each batch its own
# transaction: locked as a worker locks them, then completed by the statement $1, a form of
# `bench_peer completion`), until none is left or $3 (default: no limit) are completed.
complete_sql() {
  echo "do \$\$ declare ids bigint[]; remaining bigint := ${3:-null}; begin
  loop
    select array_agg(jobs.id order by jobs.id) into ids
    from (select jobs.id from graphile_worker._private_jobs as jobs order by jobs.id
      limit least($2, coalesce(remaining, $2))) as jobs;
    exit when ids is null;
    update graphile_worker._private_jobs set locked_by = 'w', locked_at = now(), attempts = attempts + 1
    where id = any(ids);
    execute \$completion\$$1\$completion\$ using 'w'::text, ids;
    commit;
    remaining := remaining - cardinality(ids);
    exit when remaining <= 0;
  end loop;
end \$\$"
}
