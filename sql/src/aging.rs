//! Priority aging: the records' tables and the chore's function, and the statements behind
//! `WorkerUtils`' agings (docs/guide/priority-aging.md).

/// The records' tables of agings and of the jobs aged, and the chore's function (records
/// step 20).
pub const TABLES: &str = include_str!("../records/000020.sql");
/// See the file for parameters.
pub const SET: &str = include_str!("../queries/aging/set.sql");
/// See the file for parameters.
pub const REMOVE: &str = include_str!("../queries/aging/remove.sql");
/// The agings with their author and time.
pub const LIST: &str = include_str!("../queries/aging/list.sql");
/// One pass of the chore: `$1` the most jobs changed.
pub const PASS: &str = include_str!("../queries/aging/pass.sql");
