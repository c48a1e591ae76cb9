//! Adds jobs for the `worker` example: one at a time, in a batch, and deduplicated by key.
use formica_tokio::{
    chrono, pool, serde_json::json, JobKeyMode, JobSpec, RawJob, WorkerUtils, DEFAULT_SCHEMA,
};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("DATABASE_URL").map_err(|_| "set DATABASE_URL")?;
    let utils = WorkerUtils::new(pool(&url, 2)?, DEFAULT_SCHEMA);
    utils.migrate().await?;

    let job = utils
        .add_raw_job("notify", json!({ "channel": "ops", "text": "deployed" }), JobSpec::default())
        .await?;
    println!("added job {} for {}", job.id, job.task_identifier);

    // One round trip for many jobs.
    let batch: Vec<RawJob> = (1..=3)
        .map(|i| RawJob {
            identifier: "resize".into(),
            payload: json!({ "path": format!("img{i}.png"), "width": i * 2000 }),
            spec: JobSpec::default(),
        })
        .collect();
    println!("added {} resize jobs", utils.add_raw_jobs(&batch).await?.len());

    // Adding the same key twice leaves one job, rescheduled to the later time.
    let later = JobSpec::builder().job_key("digest:ops").job_key_mode(JobKeyMode::Replace);
    for minutes in [1, 5] {
        let spec = later.clone().run_at(chrono::Utc::now() + chrono::Duration::minutes(minutes)).build();
        let job =
            utils.add_raw_job("notify", json!({ "channel": "ops", "text": "daily digest" }), spec).await?;
        println!("job {} with key digest:ops runs at {}", job.id, job.run_at);
    }
    Ok(())
}
