//! The core's tests, one binary: a module per file beside this one (and the machine's
//! focused tests in `machine/`), so the workspace links one test binary for the crate, not
//! one a file. The root is not named `main.rs` on purpose: proptest keeps a file's failure
//! seeds beside it (`<file>.proptest-regressions`) only while no `main.rs` or `lib.rs` sits
//! in a folder above the file.

mod aging_sim;
mod chores_sim;
mod controls_sim;
mod cron;
mod cron_props;
mod cron_sim;
mod cron_zones;
mod fair_sim;
mod flow_sim;
mod lost_answers_sim;
#[path = "machine/main.rs"]
mod machine;
mod recovery_sim;
mod schedules_sim;
mod sim_faults;
mod sim_model;
mod task_limits_sim;
mod text_props;
mod workflow_sim;
