//! The Rust blocks of the README and of the guides no crate's docs include, as doctests:
//! `cargo test --workspace` compiles each (and runs those not marked `no_run`), so the docs
//! cannot show code that does not build. They need this crate's dependencies (sqlx,
//! tracing-subscriber, opentelemetry), which the published crates do not have. The one
//! block marked `ignore` is the README's program, `examples/worker-app`, built there and
//! checked against the copy by a test. `tests/tests/docs.rs` checks that every guide is
//! included here or by a crate, and that no block hides what a reader must write.

/// `README.md`'s blocks.
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

/// `docs/guide/adding-jobs.md`'s blocks.
#[doc = include_str!("../../docs/guide/adding-jobs.md")]
pub struct AddingJobsDoctests;

/// `docs/guide/testing.md`'s blocks (its handler and unit test are `tests/tests/testing.rs`'s
/// own, which runs them and checks the copy).
#[doc = include_str!("../../docs/guide/testing.md")]
pub struct TestingDoctests;

/// `docs/guide/observability.md`'s blocks.
#[doc = include_str!("../../docs/guide/observability.md")]
pub struct ObservabilityDoctests;

/// `docs/guide/why.md`'s blocks.
#[doc = include_str!("../../docs/guide/why.md")]
pub struct WhyDoctests;

/// `docs/guide/middleware.md`'s blocks.
#[doc = include_str!("../../docs/guide/middleware.md")]
pub struct MiddlewareDoctests;

/// `docs/guide/dead-letters.md`'s blocks.
#[doc = include_str!("../../docs/guide/dead-letters.md")]
pub struct DeadLettersDoctests;

/// `docs/guide/bulk-actions.md`'s blocks.
#[doc = include_str!("../../docs/guide/bulk-actions.md")]
pub struct BulkActionsDoctests;

/// `docs/guide/snooze-and-retries.md`'s blocks.
#[doc = include_str!("../../docs/guide/snooze-and-retries.md")]
pub struct SnoozeAndRetriesDoctests;

/// `docs/guide/unique-jobs.md`'s blocks.
#[doc = include_str!("../../docs/guide/unique-jobs.md")]
pub struct UniqueJobsDoctests;

/// `docs/guide/flow-control.md`'s blocks.
#[doc = include_str!("../../docs/guide/flow-control.md")]
pub struct FlowControlDoctests;

/// `docs/guide/priority-aging.md`'s blocks.
#[doc = include_str!("../../docs/guide/priority-aging.md")]
pub struct PriorityAgingDoctests;
/// `docs/guide/bounded-queues.md`'s blocks.
#[doc = include_str!("../../docs/guide/bounded-queues.md")]
pub struct BoundedQueuesDoctests;
/// `docs/guide/fairness.md`'s blocks.
#[doc = include_str!("../../docs/guide/fairness.md")]
pub struct FairnessDoctests;

/// `docs/guide/durable-jobs.md`'s blocks.
#[doc = include_str!("../../docs/guide/durable-jobs.md")]
pub struct DurableJobsDoctests;

/// `docs/guide/workflows.md`'s blocks.
#[doc = include_str!("../../docs/guide/workflows.md")]
pub struct WorkflowsDoctests;

/// `docs/guide/cron-time-zones.md`'s blocks.
#[doc = include_str!("../../docs/guide/cron-time-zones.md")]
pub struct CronTimeZonesDoctests;

/// `docs/guide/runtime-schedules.md`'s blocks.
#[doc = include_str!("../../docs/guide/runtime-schedules.md")]
pub struct RuntimeSchedulesDoctests;

/// `docs/guide/dashboard.md`'s blocks (none is Rust yet; included so one would be compiled).
#[doc = include_str!("../../docs/guide/dashboard.md")]
pub struct DashboardDoctests;

/// `docs/guide/deploying.md`'s blocks (none is Rust yet; included so one would be compiled).
#[doc = include_str!("../../docs/guide/deploying.md")]
pub struct DeployingDoctests;

/// `docs/guide/health.md`'s blocks.
#[doc = include_str!("../../docs/guide/health.md")]
pub struct HealthDoctests;

/// `docs/guide/progress.md`'s blocks.
#[doc = include_str!("../../docs/guide/progress.md")]
pub struct ProgressDoctests;

/// `docs/guide/job-logs.md`'s blocks.
#[doc = include_str!("../../docs/guide/job-logs.md")]
pub struct JobLogsDoctests;

/// `docs/guide/encrypted-payloads.md`'s blocks.
#[doc = include_str!("../../docs/guide/encrypted-payloads.md")]
pub struct EncryptedPayloadsDoctests;
