//! Testing an application's use of Formica (the `testing` feature): a handler's unit test
//! with no database, assertions on what was enqueued, and a schema per test.
//!
//! - [`TestJob`]: build a job (payload, fields, application state), run its handler with
//!   [`TestJob::run`] or [`TestJob::run_batch`] in a plain `#[test]`, and get back how it
//!   ended and the jobs it added through its context ([`Ran`]), to the queue or to its
//!   workflow.
//! - [`Expected`]: the jobs a test looks for (task, payload subset, queue, key, priority,
//!   `run_at` window), checked against a run's added jobs ([`Ran::assert_added`],
//!   [`Ran::refute_added`]) or against the database ([`assert_enqueued`],
//!   [`refute_enqueued`], [`enqueued`]). A failed assertion lists the jobs it saw.
//! - [`TestSchema`]: a migrated schema of its own for each test on one database, and
//!   [`drain`], which runs the due jobs of some tasks with a real worker and says how each
//!   ended.
//!
//! The guide `docs/guide/testing.md` in the repository walks through them.
//!
//! ```
//! use formica::testing::{Expected, TestJob, TestOutcome};
//! use formica::{JobContext, JobSpec, Task, TaskHandler, TaskResult};
//!
//! #[derive(serde::Serialize, serde::Deserialize)]
//! struct Signup { user: u64 }
//! impl Task for Signup { const IDENTIFIER: &'static str = "signup"; }
//!
//! #[derive(serde::Serialize, serde::Deserialize)]
//! struct Welcome { user: u64 }
//! impl Task for Welcome { const IDENTIFIER: &'static str = "welcome"; }
//!
//! impl TaskHandler for Signup {
//!     async fn run(self, ctx: JobContext) -> TaskResult {
//!         ctx.add_job(&Welcome { user: self.user }, JobSpec::default()).await?;
//!         Ok(())
//!     }
//! }
//!
//! # futures::executor::block_on(async {
//! let ran = TestJob::new(&Signup { user: 7 }).run::<Signup>().await;
//! assert_eq!(ran.outcome, TestOutcome::Completed);
//! ran.assert_added(&Expected::of::<Welcome>().payload(serde_json::json!({ "user": 7 })));
//! # });
//! ```

mod drain;
mod expected;
mod job;
pub(crate) mod recorded;
mod schema;

pub use drain::{drain, Drained, Ended};
pub use expected::{assert_enqueued, contains, describe, enqueued, refute_enqueued, Expected};
pub use job::{Ran, TestJob, TestOutcome};
pub use recorded::AddedWorkflowJob;
pub use schema::TestSchema;
