//! Runtime schedules (records migration 8): see `records/000008.sql`.

/// The records' table of runtime schedules.
pub const TABLE: &str = include_str!("../records/000008.sql");
/// `$1` identifier, `$2` canonical line: add or replace, and notify.
pub const PUT: &str = include_str!("../queries/schedules/put_schedule.sql");
/// `$1` identifier: remove, and notify.
pub const REMOVE: &str = include_str!("../queries/schedules/remove_schedule.sql");
/// Every schedule with its `last_execution`.
pub const LIST: &str = include_str!("../queries/schedules/list_schedules.sql");
/// What a worker reads: identifier and line.
pub const READ: &str = include_str!("../queries/worker/read_schedules.sql");
