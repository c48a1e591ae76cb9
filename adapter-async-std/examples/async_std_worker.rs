//! The tokio `worker` example on async-std: no tokio runtime runs in this process.
//!
//! ```sh
//! DATABASE_URL=postgres://localhost/mydb cargo run -p formica-async-std --example async_std_worker
//! ```
use formica_async_std::{stop_on_signals, JobContext, JobSpec, Task, TaskHandler, TaskResult, WorkerOptions};
use serde::{Deserialize, Serialize};

/// Prints a greeting; a name that is empty fails the job, which is then retried.
#[derive(Serialize, Deserialize)]
struct Greet {
    name: String,
}

impl Task for Greet {
    const IDENTIFIER: &'static str = "greet";
}

impl TaskHandler for Greet {
    async fn run(self, ctx: JobContext) -> TaskResult {
        if self.name.is_empty() {
            return Err("nobody to greet".into());
        }
        println!("job {}: hello, {}", ctx.job().id, self.name);
        Ok(())
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    async_std::task::block_on(async {
        let url = std::env::var("DATABASE_URL").map_err(|_| "set DATABASE_URL")?;
        let worker = WorkerOptions::default().database_url(url).define_job::<Greet>().init().await?;
        let utils = worker.create_utils();
        for name in ["Ada", "Grace", ""] {
            utils.add_job(&Greet { name: name.into() }, JobSpec::default()).await?;
        }
        stop_on_signals(worker.handle())?;
        worker.run().await?;
        Ok(())
    })
}
