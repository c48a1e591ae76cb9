//! Statements behind `WorkerUtils`: each that returns jobs returns `_private_jobs` columns
//! plus `task_identifier` and `queue_name`.

/// See the file for parameters.
pub const ADD_JOB: &str = include_str!("../queries/add_job.sql");
/// `ADD_JOB`'s parameters, with `$9` `replace_and_abort`: stops the run of the key's job
/// and holds the new job behind it (see the file).
pub const ADD_ABORTING: &str = include_str!("../queries/add_aborting.sql");
/// `ADD_JOB`'s parameters, then `$10` the claim's period in microseconds: adds only if
/// it claims the job key (see the file).
pub const ADD_CLAIMED: &str = include_str!("../queries/add_claimed.sql");
/// See the file for parameters.
pub const ADD_JOBS: &str = include_str!("../queries/add_jobs.sql");
/// See the file for parameters: [`ADD_JOBS`] for jobs without key and queue, faster.
pub const ADD_JOBS_PLAIN: &str = include_str!("../queries/add_jobs_plain.sql");
/// Names of task and queue ids (for rows whose names `ADD_JOBS` could not see).
pub const NAMES: &str = include_str!("../queries/names.sql");
/// See the file for parameters.
pub const REMOVE_JOB: &str = include_str!("../queries/remove_job.sql");
/// See the file for parameters.
pub const COMPLETE_JOBS: &str = include_str!("../queries/complete_jobs.sql");
/// See the file for parameters.
pub const PERMANENTLY_FAIL_JOBS: &str = include_str!("../queries/permanently_fail_jobs.sql");
/// `$1` job ids, `$2` reason; rows: (id, holder or null if failed here, whether the
/// holder has a Formica lease). A held job gets a request in `:RECORDS.cancel_requests`.
pub const CANCEL_JOBS: &str = include_str!("../queries/cancel_jobs.sql");
/// See the file for parameters.
pub const RESCHEDULE_JOBS: &str = include_str!("../queries/reschedule_jobs.sql");
/// See the file for parameters.
pub const FORCE_UNLOCK_WORKERS: &str = include_str!("../queries/force_unlock_workers.sql");
/// Deletes jobs out of attempts that no worker holds.
pub const CLEANUP_DELETE_PERMAFAILED_JOBS: &str =
    include_str!("../queries/cleanup_delete_permafailed_jobs.sql");
/// Deletes unused task identifiers except `$1`.
pub const CLEANUP_GC_TASK_IDENTIFIERS: &str = include_str!("../queries/cleanup_gc_task_identifiers.sql");
/// Deletes unused, unlocked queues.
pub const CLEANUP_GC_JOB_QUEUES: &str = include_str!("../queries/cleanup_gc_job_queues.sql");
/// `$1` the envelope's member, `$2` the newest key's id, `$3` after this job id, `$4` at
/// most: waiting jobs whose payload is sealed under an older key (id, task, payload text).
pub const SEALED_UNDER_OLDER_KEYS: &str = include_str!("../queries/encryption/sealed_under_older_keys.sql");
/// `$1` job id, `$2` its payload as read, `$3` the payload sealed anew: rewritten if unheld
/// and unchanged.
pub const RESEAL: &str = include_str!("../queries/encryption/reseal.sql");
