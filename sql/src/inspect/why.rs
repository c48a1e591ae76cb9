//! Read-only statements behind `formica why` (`formica::inspect::why`): each reads by a
//! primary key or an index, but `CAP_HOLDERS` (see its file).

/// Every Formica worker's lease with what it runs.
pub const WORKERS: &str = include_str!("../../queries/inspect/why/workers.sql");
/// The locked jobs of task `$1` in partition `$4` of its cap (`$2` kind, `$3` argument), at
/// most `$5`.
pub const CAP_HOLDERS: &str = include_str!("../../queries/inspect/why/cap_holders.sql");
/// The starts within `$3` ms of task `$1` in partition `$2` of its rate limit.
pub const RATE_STARTS: &str = include_str!("../../queries/inspect/why/rate_starts.sql");
/// The jobs due before a job of priority `$1`, run_at `$2`, counted up to `$4`; of task `$3`.
pub const AHEAD: &str = include_str!("../../queries/inspect/why/ahead.sql");
/// The jobs of task `$1` that ended in the last `$2` ms, up to `$3`, and their first and last end.
pub const FINISHED: &str = include_str!("../../queries/inspect/why/finished.sql");
