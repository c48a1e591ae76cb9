//! `formica`: run a worker whose tasks are executables in any language, and manage jobs.
//!
//! Flags follow graphile-worker's CLI so either can be swapped for the other. With no
//! connection given at all, a private database in `./.formica/` is used (see `embedded`).

mod admin;
mod embedded;
mod output;

use clap::Parser;
use formica_tokio::{Error, MigrateError, WorkerUtils};
use output::Output;
use std::process::ExitCode;

/// Exit code when the database has a breaking migration newer than this Formica (as
/// graphile-worker).
const EXIT_NEWER_SCHEMA: u8 = 57;

/// Run jobs from a PostgreSQL queue shared with Graphile Worker, or manage them.
#[derive(Debug, Parser)]
#[command(name = "formica", version, about)]
struct Cli {
    /// PostgreSQL connection string (else DATABASE_URL, else the PG* variables, else a
    /// private database in ./.formica).
    #[arg(short = 'c', long, global = true, env = "DATABASE_URL", hide_env_values = true)]
    connection: Option<String>,
    /// Schema of the job tables.
    #[arg(
        short = 's',
        long,
        global = true,
        env = "GRAPHILE_WORKER_SCHEMA",
        default_value = "graphile_worker"
    )]
    schema: String,
    /// Print results as JSON (utility subcommands).
    #[arg(long, global = true)]
    json: bool,
    /// Install or upgrade the schema, then exit.
    #[arg(long)]
    schema_only: bool,
    #[command(subcommand)]
    command: Option<admin::Admin>,
}

/// libpq's PG* variables as a key=value connection string, if any is set.
fn from_pg_env() -> Option<String> {
    let parts: Vec<String> = [
        ("PGHOST", "host"),
        ("PGPORT", "port"),
        ("PGUSER", "user"),
        ("PGPASSWORD", "password"),
        ("PGDATABASE", "dbname"),
    ]
    .iter()
    .filter_map(|(var, key)| {
        let value = std::env::var(var).ok()?;
        Some(format!("{key}='{}'", value.replace('\\', "\\\\").replace('\'', "\\'")))
    })
    .collect();
    (!parts.is_empty()).then(|| parts.join(" "))
}

async fn main_inner(cli: Cli) -> Result<(), Error> {
    let (embedded, url) = match cli.connection.clone().or_else(from_pg_env) {
        Some(url) => (None, url),
        None => {
            let (embedded, url) = embedded::Embedded::start().map_err(Error::Config)?;
            (Some(embedded), url)
        }
    };
    let result = async {
        let utils = WorkerUtils::new(formica_tokio::pool(&url, 4)?, cli.schema.clone());
        utils.migrate().await?;
        if cli.schema_only {
            println!("Schema updated");
            return Ok(());
        }
        let out = if cli.json { Output::Json } else { Output::Human };
        match cli.command {
            Some(command) => admin::run(command, &utils, out).await,
            None => Err(Error::Config("running a worker from the command line is not available yet".into())),
        }
    }
    .await;
    if let Some(embedded) = embedded {
        embedded.stop();
    }
    result
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("formica: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(main_inner(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("formica: {e}");
            match e {
                Error::Migrate(MigrateError::NewerBreaking { .. }) => ExitCode::from(EXIT_NEWER_SCHEMA),
                _ => ExitCode::FAILURE,
            }
        }
    }
}
