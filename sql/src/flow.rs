//! Flow control (pauses, caps, rate limits, fairness and bounds): the records' tables, the
//! statements behind `WorkerUtils`' pauses and controls, and the worker's read of them (the
//! fetches that obey them are `worker`'s; the adds that keep bounds, `utils`').

/// The records' tables of pauses and caps, and the capped fetch's function (records
/// migration 6; a call of the limited one since migration 14).
pub const PAUSES: &str = include_str!("../records/000006.sql");
/// See the file for parameters.
pub const PAUSE: &str = include_str!("../queries/flow_pause.sql");
/// See the file for parameters.
pub const RESUME: &str = include_str!("../queries/flow_resume.sql");
/// The pauses with their reason, author and time.
pub const PAUSED: &str = include_str!("../queries/flow_paused.sql");
/// The worker's read of the flow controls: see the file for the rows.
pub const READ_FLOW: &str = include_str!("../queries/worker/read_flow.sql");
/// See the file for parameters.
pub const CAP: &str = include_str!("../queries/flow_cap.sql");
/// See the file for parameters.
pub const UNCAP: &str = include_str!("../queries/flow_uncap.sql");
/// The caps with their author and time.
pub const CAPS: &str = include_str!("../queries/flow_caps.sql");
/// The records' tables of rate limits and their starts, and the limited fetch's
/// function (records migration 10).
pub const RATE_LIMITS: &str = include_str!("../records/000010.sql");
/// See the file for parameters.
pub const LIMIT: &str = include_str!("../queries/flow_limit.sql");
/// See the file for parameters.
pub const UNLIMIT: &str = include_str!("../queries/flow_unlimit.sql");
/// The rate limits with their author and time.
pub const LIMITS: &str = include_str!("../queries/flow_limits.sql");
/// The records' table of bounds on waiting jobs, the check every Formica add makes against
/// it, and abort-on-replace's hold (records migration 25).
pub const BOUNDS: &str = include_str!("../records/000025.sql");
/// See the file for parameters.
pub const BOUND: &str = include_str!("../queries/flow_bound.sql");
/// See the file for parameters.
pub const UNBOUND: &str = include_str!("../queries/flow_unbound.sql");
/// The bounds with their author and time.
pub const BOUNDS_LIST: &str = include_str!("../queries/flow_bounds.sql");
/// The part (`BOUND`) that makes a single add (`utils::ADD_JOB`, `ADD_CLAIMED`,
/// `ADD_ABORTING`) keep its task's bound; the template alone adds unbounded.
pub const BOUND_ONE: &str = include_str!("../queries/bounds/one.sql");
/// The part (`BOUND`) that makes `utils::ADD_JOBS` keep its tasks' bounds.
pub const BOUND_BATCH: &str = include_str!("../queries/bounds/batch.sql");
/// The part (`BOUND`) that makes `utils::ADD_JOBS_PLAIN` leave bounded tasks to `ADD_JOBS`.
pub const BOUND_PLAIN: &str = include_str!("../queries/bounds/plain.sql");
/// Several caps and limits per task, fairness's tables and the controlled fetch's function
/// (records migration 26; the limited fetch a call of it).
pub const CONTROLS: &str = include_str!("../records/000026.sql");
/// See the file for parameters.
pub const FAIR: &str = include_str!("../queries/flow_fair.sql");
/// See the file for parameters.
pub const UNFAIR: &str = include_str!("../queries/flow_unfair.sql");
/// The fairness with its author and time.
pub const FAIRS: &str = include_str!("../queries/flow_fairs.sql");
