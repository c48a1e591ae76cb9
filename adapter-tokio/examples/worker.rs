//! A worker with two tasks (one typed, one taking its payload as JSON), stopped gracefully by Ctrl-C (a second Ctrl-C aborts).
//!
//! ```sh
//! DATABASE_URL=postgres://localhost/mydb cargo run -p formica-tokio --example worker
//! DATABASE_URL=postgres://localhost/mydb cargo run -p formica-tokio --example add_jobs
//! ```
use formica_tokio::{stop_on_signals, JobContext, Task, TaskHandler, TaskResult, WorkerOptions};
use serde::{Deserialize, Serialize};

/// Resizes an image; fails for widths over 4096, so the job is retried with backoff.
#[derive(Serialize, Deserialize)]
struct Resize {
    path: String,
    width: u32,
}

impl Task for Resize {
    const IDENTIFIER: &'static str = "resize";
}

impl TaskHandler for Resize {
    async fn run(self, ctx: JobContext) -> TaskResult {
        if self.width > 4096 {
            return Err(format!("{} px is wider than 4096", self.width).into());
        }
        println!("job {} (attempt {}): {} -> {} px", ctx.job().id, ctx.job().attempts, self.path, self.width);
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("DATABASE_URL").map_err(|_| "set DATABASE_URL")?;
    let worker = WorkerOptions::default()
        .database_url(url)
        .concurrency(4)
        // A task without a type of its own: its payload as JSON.
        .define_raw_job("notify", |ctx, payload| async move {
            let text = payload["text"].as_str().ok_or("a notify job needs a text")?;
            println!("job {}: #{}: {text}", ctx.job().id, payload["channel"].as_str().unwrap_or("general"));
            Ok(())
        })
        .define_job::<Resize>()
        .on_event(|event| eprintln!("{event:?}"))
        .init()
        .await?;
    stop_on_signals(worker.handle())?;
    worker.run().await?;
    Ok(())
}
