//! An example application: a worker with one task, stopped by a signal.

use formica_tokio::{stop_on_signals, JobContext, Task, TaskHandler, TaskResult, WorkerOptions};

#[derive(serde::Serialize, serde::Deserialize)]
struct SendWelcome {
    to: String,
}

impl Task for SendWelcome {
    const IDENTIFIER: &'static str = "send_welcome";
}

impl TaskHandler for SendWelcome {
    async fn run(self, ctx: JobContext) -> TaskResult {
        // Logged inside the job's span: the line carries its job id and task.
        tracing::info!(attempt = ctx.job().attempts, "welcome mail to {}", self.to);
        Ok(()) // an Err (or a panic) fails this attempt; it is retried with backoff
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Formica logs through `tracing`: print INFO and above, or what RUST_LOG says.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    tracing_subscriber::fmt().with_env_filter(filter).init();

    let worker = WorkerOptions::default() // connects to DATABASE_URL (or .database_url("postgres://..."))
        .concurrency(10)
        .define_job::<SendWelcome>()
        .on_event(|event| tracing::debug!(?event)) // job start/success/error/..., for metrics
        .init() // connects and migrates
        .await?;
    stop_on_signals(worker.handle())?; // SIGINT/SIGTERM: graceful, then forced
    worker.run().await?; // or run_once(): until nothing is runnable
    Ok(())
}
