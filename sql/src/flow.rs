//! Flow control (pauses, caps, rate limits and fairness): the records' tables, the statements
//! behind `WorkerUtils`' pauses and controls, and the worker's read of them (the fetches that
//! obey them are `worker`'s).

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
/// Several caps and limits per task, fairness's tables and the controlled fetch's function
/// (records migration 20; the limited fetch a call of it).
pub const CONTROLS: &str = include_str!("../records/000020.sql");
/// See the file for parameters.
pub const FAIR: &str = include_str!("../queries/flow_fair.sql");
/// See the file for parameters.
pub const UNFAIR: &str = include_str!("../queries/flow_unfair.sql");
/// The fairness with its author and time.
pub const FAIRS: &str = include_str!("../queries/flow_fairs.sql");
