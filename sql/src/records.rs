//! Formica's records schema, `formica_<schema>`: its migrations, with a ledger of their own
//! beside graphile-worker's, and the tables of the steps no feature module holds.

use crate::migrate::Step;

/// The migrations of Formica's records schema, in order (its own ledger, ids from 1).
pub const RECORDS_STEPS: &[Step] = &[
    Step { id: 1, sql: &[include_str!("../records/000001.sql")] },
    Step { id: 2, sql: &[CANCEL_REQUESTS] },
    Step { id: 3, sql: &[LEASE_IDENTITY] },
    Step { id: 4, sql: &[LEASE_CRONTAB] },
    Step { id: 5, sql: &[crate::traces::JOB_TRACES] },
    Step { id: 6, sql: &[crate::flow::PAUSES] },
    Step { id: 7, sql: &[crate::history::JOB_HISTORY] },
    Step { id: 8, sql: &[crate::schedules::TABLE] },
    Step { id: 9, sql: &[UNIQUE_CLAIMS] },
    Step { id: 10, sql: &[crate::flow::RATE_LIMITS] },
    Step { id: 11, sql: &[crate::workflows::TABLES] },
    Step { id: 12, sql: &[include_str!("../records/000012.sql")] },
    Step { id: 13, sql: &[include_str!("../records/000013.sql")] },
    Step { id: 14, sql: &[include_str!("../records/000014.sql")] },
    Step { id: 15, sql: &[include_str!("../records/000015.sql")] },
    Step { id: 16, sql: &[crate::durable::JOB_STEPS] },
    Step { id: 17, sql: &[include_str!("../records/000017.sql")] },
    Step { id: 18, sql: &[crate::reports::TABLES] },
    Step { id: 19, sql: &[crate::dead_letters::TABLES] },
    Step { id: 20, sql: &[crate::aging::TABLES] },
    Step { id: 21, sql: &[include_str!("../records/000021.sql")] },
    Step { id: 22, sql: &[crate::workflows::SETTLING] },
    Step { id: 23, sql: &[crate::workflows::WAITS] },
    Step { id: 24, sql: &[crate::workflows::FAN_OUT] },
    Step { id: 25, sql: &[crate::flow::BOUNDS] },
    Step { id: 26, sql: &[crate::flow::CONTROLS] },
    Step { id: 27, sql: &[crate::history::TELL_WAITERS] },
    Step { id: 28, sql: &[crate::workflows::GUARDED_CALLS] },
    Step { id: 29, sql: &[include_str!("../records/000029.sql")] },
    Step { id: 30, sql: &[crate::history::PRUNE_PASS] },
    Step { id: 31, sql: &[crate::history::WAITERS_BY_KEY] },
    Step { id: 32, sql: &[crate::history::ATTACHED_DAYS] },
    Step { id: 33, sql: &[crate::workflows::SETTLED_IN_PLACE] },
];

/// `$1` the quoted name of a records table, `$2` the records schema's name, `$3` privileges
/// (`select`, `insert, update`): whether this role can use it so (see the file).
pub const USABLE: &str = include_str!("../queries/records_usable.sql");

/// Claims of unique jobs not to add again within a period, finished or not (records step 9).
pub const UNIQUE_CLAIMS: &str = include_str!("../records/000009.sql");

/// The records' table of cancel requests for held jobs (records migration 2).
pub const CANCEL_REQUESTS: &str = include_str!("../records/000002.sql");

/// The leases' host, pid, version, start and last heartbeat (records migration 3).
pub const LEASE_IDENTITY: &str = include_str!("../records/000003.sql");

/// The crontab each worker runs, on its lease (records migration 4).
pub const LEASE_CRONTAB: &str = include_str!("../records/000004.sql");
