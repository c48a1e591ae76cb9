//! formica-sql: Formica's schema migrations and statements, as text. The driver runs them;
//! depend on this crate to read or run Formica's SQL with a client of your own.
//!
//! ```
//! // Statements name the schema through a placeholder, replaced when a statement is sent.
//! let sql = formica_sql::render("select count(*) from :SCHEMA.jobs", "graphile_worker");
//! assert_eq!(sql, r#"select count(*) from "graphile_worker".jobs"#);
//! // The ledger this Formica writes: graphile-worker 0.18's migrations 1 to 20.
//! assert_eq!(formica_sql::LATEST, 20);
//! ```
//!
//! Two kinds of blanks, each with its syntax:
//! - Placeholders, the same values in every statement of a schema, that [`render`] puts in
//!   when a statement is rendered for a schema: `:SCHEMA` (the quoted schema name),
//!   `:RECORDS` (Formica's own records, in the schema [`records_schema`] names, kept apart so
//!   that graphile-worker's schema and ledger stay exactly its own) and `:JOB_STATE` (the
//!   one expression of a job's state, [`JOB_STATE`]).
//! - Markers, `/*:NAME*/`, where a form of a statement takes a part (history's write, the
//!   walking fetch's candidates, a trace context's columns...): [`fill`] makes each form,
//!   refusing a marker left unfilled or a part no marker takes.
//!
//! The files follow the folders of `sql/queries/`: a module a concern. The driver runs the
//! SQL; the text stays plain.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod aging;
pub mod bulk;
pub mod dead_letters;
pub mod durable;
mod fill;
pub mod flow;
pub mod health;
pub mod history;
pub mod inspect;
pub mod migrate;
pub mod records;
pub mod reports;
pub mod schedules;
pub mod traces;
pub mod utils;
pub mod worker;
pub mod workflows;

pub use fill::{fill, FillError};
pub use migrate::{Step, BREAKING, INSTALL, LATEST, OLDEST_UPGRADABLE, STEPS};
pub use records::{CANCEL_REQUESTS, LEASE_CRONTAB, LEASE_IDENTITY, RECORDS_STEPS, UNIQUE_CLAIMS, USABLE};

/// The placeholder every statement uses for the schema name.
pub const PLACEHOLDER: &str = ":SCHEMA";

/// The placeholder of the schema of Formica's own records.
pub const RECORDS_PLACEHOLDER: &str = ":RECORDS";

/// The placeholder of a job's state, [`JOB_STATE`].
pub const JOB_STATE_PLACEHOLDER: &str = ":JOB_STATE";

/// Quote `schema` as an SQL identifier.
pub fn quote_ident(schema: &str) -> String {
    format!("\"{}\"", schema.replace('"', "\"\""))
}

/// The schema holding Formica's records for the graphile-worker schema `schema`:
/// `formica_<schema>` (`formica_graphile_worker` by default).
pub fn records_schema(schema: &str) -> String {
    format!("formica_{schema}")
}

/// `sql` with the placeholders replaced: `:SCHEMA` and `:RECORDS` by the quoted `schema`
/// and its records schema, `:JOB_STATE` by [`JOB_STATE`].
pub fn render(sql: &str, schema: &str) -> String {
    let sql = match sql.contains(JOB_STATE_PLACEHOLDER) {
        true => sql.replace(JOB_STATE_PLACEHOLDER, JOB_STATE),
        false => sql.to_owned(),
    };
    sql.replace(RECORDS_PLACEHOLDER, &quote_ident(&records_schema(schema)))
        .replace(PLACEHOLDER, &quote_ident(schema))
}

/// A job's one state, as an SQL expression over a `_private_jobs` row named `jobs`:
/// `running` (a worker holds it), `permanently_failed` (out of attempts), `ready` (may run
/// now, retries that are due included), `failed` (waiting to retry), `scheduled` (waiting
/// for its first run). Statements name it `:JOB_STATE`, which [`render`] fills in.
pub const JOB_STATE: &str = "(case \
when jobs.locked_at is not null then 'running' \
when jobs.attempts >= jobs.max_attempts then 'permanently_failed' \
when jobs.run_at <= now() then 'ready' \
when jobs.last_error is not null then 'failed' \
else 'scheduled' end)";

/// The job states of [`JOB_STATE`], in the order people read them.
pub const JOB_STATES: [&str; 5] = ["ready", "scheduled", "running", "failed", "permanently_failed"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_quotes_the_schema() {
        assert_eq!(render("select * from :SCHEMA.jobs", "my\"s"), "select * from \"my\"\"s\".jobs");
        assert_eq!(render("x):::SCHEMA.job_spec", "gw"), "x)::\"gw\".job_spec");
        assert_eq!(render(":RECORDS.leases, :SCHEMA.jobs", "gw"), "\"formica_gw\".leases, \"gw\".jobs");
        assert!(render("select :JOB_STATE", "gw").contains("'permanently_failed'"));
    }

    #[test]
    fn steps_run_from_oldest_upgradable_to_latest_in_order() {
        let ids: Vec<i32> = STEPS.iter().map(|s| s.id).collect();
        let expected: Vec<i32> = (OLDEST_UPGRADABLE + 1..=LATEST).collect();
        assert_eq!(ids, expected);
        assert!(STEPS.iter().find(|s| s.id == 19).is_some_and(Step::breaking));
    }
}
