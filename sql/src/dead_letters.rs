//! Dead letters: the records' tables, the statements behind `WorkerUtils`' dead letters, and
//! the part of the worker's failure that sends a job failed for good to its task's.

/// The records' tables of dead letters and of their sends (records migration 15).
pub const TABLES: &str = include_str!("../records/000019.sql");
/// `$1` task, `$2` target task, `$3` set by (null: the database role). Row: when set.
pub const SET: &str = include_str!("../queries/dead_letters/set.sql");
/// `$1` task. Rows: one if it had a dead letter.
pub const REMOVE: &str = include_str!("../queries/dead_letters/remove.sql");
/// The dead letters with their sends (see the file for the columns).
pub const LIST: &str = include_str!("../queries/dead_letters/list.sql");
/// The part of `worker::FAIL_JOBS` that sends the jobs it fails for good to their dead
/// letters (marker `DEAD_LETTERS`): every failure takes it.
pub(crate) const SEND: &str = include_str!("../queries/dead_letters/send.sql");
