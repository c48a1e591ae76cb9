//! `formica`: run a worker whose tasks are executables in any language, and manage jobs.
//!
//! Flags follow graphile-worker's CLI so either can be swapped for the other. With no
//! connection given at all, a private database in `./.formica/` is used (see `embedded`).

mod admin;
mod bulk;
mod controls;
mod crontab;
mod dead_letters;
mod doctor;
mod embedded;
mod history;
mod metrics;
mod output;
mod schedule;
mod traces;
mod why;
mod workflow;

use clap::Parser;
use formica_core::worker::{Config, DEFAULT_LOCAL_QUEUE_SIZE};
use formica_tokio::exec;
use formica_tokio::{
    CleanupTask, ConnectionSettings, Error, HistoryOptions, MigrateError, Pool, WorkerOptions, WorkerUtils,
};
use formica_tokio::{DEFAULT_MAX_POOL_SIZE, DEFAULT_QUEUE_DEPTH_INTERVAL};
use output::Output;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// Exit code when the database has a breaking migration newer than this Formica, found at
/// start or announced to the running worker (as graphile-worker).
const EXIT_NEWER_SCHEMA: u8 = 57;

/// `formica doctor`'s exit code, plus the worst severity's level: 3 a warning, 4 critical
/// (1 is a failure to check, 2 a mistake in the command line).
const EXIT_UNHEALTHY: u8 = 2;

/// Why `formica` failed.
#[derive(Debug)]
enum Failure {
    /// An error of Formica's.
    Formica(Error),
    /// A mistake or a failure the command itself found, printed as it is.
    Command(String),
    /// The folder of executable tasks could not be read.
    TasksFolder {
        /// The folder.
        path: PathBuf,
        /// Why it could not be read.
        source: std::io::Error,
    },
    /// `formica doctor` found something wrong, this badly (a warning or critical).
    Unhealthy(formica_tokio::inspect::Severity),
}

impl<E: Into<Error>> From<E> for Failure {
    fn from(error: E) -> Self {
        Failure::Formica(error.into())
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Formica(error) => error.fmt(f),
            Failure::Command(message) => f.write_str(message),
            Failure::TasksFolder { path, source } => write!(f, "tasks folder {}: {source}", path.display()),
            Failure::Unhealthy(worst) => {
                write!(f, "the queue is not healthy: the worst check is {}", worst.name())
            }
        }
    }
}

/// The help's headings: the flags every subcommand takes, and the worker's (no subcommand);
/// a subcommand's own flags stay under clap's `Options`.
const GLOBAL: &str = "Global options";
const WORKER: &str = "Worker options";

/// Run jobs from a PostgreSQL queue shared with Graphile Worker, or manage them.
#[derive(Debug, Parser)]
#[command(name = "formica", version, about)]
struct Cli {
    /// PostgreSQL connection string (else DATABASE_URL, else the PG* variables, else a
    /// private database in ./.formica).
    #[arg(short = 'c', long, global = true, env = "DATABASE_URL", hide_env_values = true, help_heading = GLOBAL)]
    connection: Option<String>,
    /// A read replica's connection string: the read subcommands (jobs, job, status,
    /// history, paused, caps, limits, workflows, schedule list, dead-letter list) and the
    /// dashboard's pages read there, so looking puts no load on the primary. Actions always
    /// go to the primary (-c).
    #[arg(long, global = true, env = "FORMICA_READ_URL", hide_env_values = true, help_heading = GLOBAL)]
    read_connection: Option<String>,
    /// Schema of the job tables.
    #[arg(
        short = 's',
        long,
        global = true,
        env = "GRAPHILE_WORKER_SCHEMA",
        default_value = "graphile_worker",
        help_heading = GLOBAL
    )]
    schema: String,
    /// Print results as JSON (utility subcommands).
    #[arg(long, global = true, help_heading = GLOBAL)]
    json: bool,
    /// How log lines (on stderr) are written: `text`, or `json` with one object a line. Which
    /// lines: RUST_LOG (default `info`; `info,formica=debug` adds job starts).
    #[arg(long, global = true, value_enum, env = "FORMICA_LOG_FORMAT", default_value = "text", help_heading = GLOBAL)]
    log_format: LogFormat,
    /// Install or upgrade the schema, then exit.
    #[arg(long, conflicts_with = "once", help_heading = WORKER)]
    schema_only: bool,
    #[command(flatten)]
    run: RunArgs,
    #[command(subcommand)]
    command: Option<Command>,
}

/// The format of log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    /// Human-readable, coloured on a terminal unless NO_COLOR is set.
    Text,
    /// One JSON object a line, the event's fields at the top level.
    Json,
}

/// Log to stderr at RUST_LOG's levels (default `info`) in `format`.
fn init_logging(format: LogFormat) {
    // OpenTelemetry's own INFO lines (a provider was set) are noise to an operator.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "info,opentelemetry=warn".into());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Text => {
            // https://no-color.org: any non-empty NO_COLOR turns colours off.
            let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
            let ansi = !no_color && std::io::IsTerminal::is_terminal(&std::io::stderr());
            builder.with_ansi(ansi).init()
        }
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(true).init(),
    }
}

/// The subcommands: job management on the database, and crontab checks without one.
#[derive(Debug, clap::Subcommand)]
enum Command {
    #[command(flatten)]
    Admin(admin::Admin),
    /// Check a crontab file, or print it as JSON (no database needed).
    #[command(subcommand)]
    Crontab(crontab::CrontabCommand),
}

/// `duration` in whole milliseconds, as the flags take it.
fn millis(duration: chrono::Duration) -> u64 {
    u64::try_from(duration.num_milliseconds()).unwrap_or_default()
}

/// How the worker runs (no subcommand). Every default is the library's, read from
/// [`Config::default`] and `WorkerOptions`' constants, so it is stated once.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = WORKER)]
struct RunArgs {
    /// Run until no job is runnable now, then exit.
    #[arg(long)]
    once: bool,
    /// Folder of executable tasks (nested folders give `a/b` identifiers).
    #[arg(long, default_value = "tasks")]
    tasks: PathBuf,
    /// Crontab file of recurring jobs (default: ./crontab if present).
    #[arg(long)]
    crontab: Option<PathBuf>,
    /// Also schedule the runtime schedules (`formica schedule put`), read on each change.
    #[arg(long)]
    runtime_schedules: bool,
    /// Jobs run at the same time (at least 1).
    #[arg(short = 'j', long, default_value_t = Config::default().concurrency, value_parser = at_least_one)]
    jobs: usize,
    /// Most database connections (at least 1).
    #[arg(short = 'm', long, default_value_t = DEFAULT_MAX_POOL_SIZE, value_parser = at_least_one)]
    max_pool_size: usize,
    /// Milliseconds between looks for jobs when no notification comes (at least 10).
    #[arg(long, default_value_t = millis(Config::default().poll_interval))]
    poll_interval: u64,
    /// Send statements unprepared (for pgBouncer in transaction mode).
    #[arg(long)]
    no_prepared_statements: bool,
    /// Keep no job history (see docs/guide/history.md; default: kept, with its retention).
    #[arg(long)]
    no_history: bool,
    /// Run only jobs carrying one of these comma-separated flags (default: any job).
    #[arg(long, value_delimiter = ',', value_name = "FLAGS")]
    accepted_flags: Vec<String>,
    /// Leave jobs carrying any of these comma-separated flags to other workers.
    #[arg(long, value_delimiter = ',', value_name = "FLAGS")]
    forbidden_flags: Vec<String>,
    /// Clean the database, then exit without running jobs (as graphile-worker):
    /// comma-separated GC_JOB_QUEUES, GC_TASK_IDENTIFIERS (keeps the identifiers of the
    /// tasks folder's programs), DELETE_PERMAFAILED_JOBS.
    #[arg(long, value_delimiter = ',', conflicts_with = "schema_only")]
    cleanup: Vec<CleanupTask>,
    /// Never install migrations: fail, naming the missing one, if the schema lacks any (for
    /// a role without DDL rights; a current schema is only read either way).
    #[arg(long, conflicts_with = "schema_only")]
    no_migrate: bool,
    /// Prefetch up to this many jobs, in batches that grow only while tasks are quick (0:
    /// fetch only for free slots).
    #[arg(long, default_value_t = DEFAULT_LOCAL_QUEUE_SIZE)]
    local_queue_size: usize,
    /// Milliseconds to batch completions for (0: write each at once).
    #[arg(long, default_value_t = millis(Config::default().complete_batch_delay))]
    complete_batch_delay: u64,
    /// Milliseconds to batch failures for (0: write each at once).
    #[arg(long, default_value_t = millis(Config::default().fail_batch_delay))]
    fail_batch_delay: u64,
    /// Serve the worker's metrics for Prometheus at http://ADDR/metrics (e.g.
    /// 127.0.0.1:9464; off by default).
    #[arg(long, value_name = "ADDR")]
    metrics_addr: Option<std::net::SocketAddr>,
    /// Milliseconds between two samples of the queue depth gauge (one query each).
    #[arg(long, default_value_t = DEFAULT_QUEUE_DEPTH_INTERVAL.as_millis() as u64)]
    queue_depth_interval: u64,
    /// Milliseconds between passes of the reindexing chore (off by default; at least a
    /// minute): each rebuilds the jobs table's most bloated index concurrently, one pass at
    /// a time across workers (docs/guide/health.md).
    #[arg(long, value_name = "MS")]
    reindex_bloated_every: Option<u64>,
    /// Never vacuum the jobs table while draining it (by default a worker whose role owns
    /// the table vacuums it when its fetches' steps over dead entries cost as much as a
    /// vacuum; docs/performance.md, "A small local queue").
    #[arg(long)]
    no_vacuum_jobs: bool,
}

/// A count that zero would make meaningless (clap names the flag in the error).
fn at_least_one(text: &str) -> Result<usize, String> {
    match text.parse() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{e}")),
    }
}

/// The task programs of `folder`, which must exist (as graphile-worker's tasks directory);
/// files that are not tasks are logged.
fn discover_tasks(folder: &std::path::Path) -> Result<exec::Discovered, Failure> {
    let found = exec::discover(folder).map_err(|source| {
        let source = match source.kind() {
            std::io::ErrorKind::NotFound => std::io::Error::new(
                source.kind(),
                "no such folder (--tasks names the folder of task programs, default ./tasks)",
            ),
            _ => source,
        };
        Failure::TasksFolder { path: folder.to_path_buf(), source }
    })?;
    for (path, reason) in &found.skipped {
        tracing::warn!(file = %path.display(), "not a task: {reason}");
    }
    Ok(found)
}

/// Run a worker for the executable tasks of `run.tasks`.
async fn run_worker(url: &str, schema: &str, run: RunArgs, found: exec::Discovered) -> Result<(), Failure> {
    if found.tasks.is_empty() {
        tracing::warn!(
            folder = %run.tasks.display(),
            "no executable tasks found: jobs will wait for a worker that has them"
        );
    }
    let probe = match run.metrics_addr {
        Some(addr) => Some(metrics::serve(addr).await?),
        None => None,
    };
    // Held until the worker returns, then its last spans are flushed.
    let _exporting = traces::init().map_err(Failure::Command)?;
    let mut options = WorkerOptions::default()
        .database_url(url)
        .schema(schema)
        .concurrency(run.jobs)
        .poll_interval(Duration::from_millis(run.poll_interval))
        .prepared_statements(!run.no_prepared_statements)
        .history(if run.no_history { HistoryOptions::off() } else { HistoryOptions::default() })
        .accepted_flags(run.accepted_flags)
        .forbidden_flags(run.forbidden_flags)
        .local_queue_size(run.local_queue_size)
        .complete_job_batch_delay(Duration::from_millis(run.complete_batch_delay))
        .fail_job_batch_delay(Duration::from_millis(run.fail_batch_delay))
        .max_pool_size(run.max_pool_size)
        .migrate(!run.no_migrate)
        .vacuum_jobs(!run.no_vacuum_jobs)
        .queue_depth_interval(Duration::from_millis(run.queue_depth_interval));
    if let Some(every) = run.reindex_bloated_every {
        options = options.reindex_bloated(Duration::from_millis(every));
    }
    let default_crontab = PathBuf::from("crontab");
    match run.crontab.or_else(|| default_crontab.is_file().then_some(default_crontab)) {
        Some(file) => {
            tracing::info!(file = %file.display(), "crontab");
            options = options.cron(file);
        }
        None => tracing::info!("no crontab file: cron is disabled"),
    }
    if run.runtime_schedules {
        options = options.runtime_schedules(formica_tokio::DEFAULT_SCHEDULES_POLL);
    }
    for task in found.tasks.values() {
        tracing::info!(task = %task.identifier, file = %task.path.display(), "task");
        let task = Arc::new(task.clone());
        options = options.define_payload_job(&task.identifier.clone(), move |ctx, payload| {
            let task = task.clone();
            async move { task.run(ctx, payload).await }
        });
    }
    let worker = options.init().await.map_err(|e| match e {
        // The library's message names its option; a command line user has a flag.
        Error::HistoryNotWritable { table } => Failure::Command(format!(
            "history is on but this role cannot insert into {table}: grant it insert, or run with --no-history"
        )),
        e => e.into(),
    })?;
    if let Some(probe) = &probe {
        probe.ready_for(worker.create_utils(), worker.worker_id());
    }
    formica_tokio::stop_on_signals(worker.handle())
        .map_err(|e| Failure::Command(format!("cannot watch for signals: {e}")))?;
    if run.once {
        Ok(worker.run_once().await?)
    } else {
        Ok(worker.run().await?)
    }
}

async fn main_inner(cli: Cli, admin: Option<admin::Admin>) -> Result<(), Failure> {
    // The worker and `--cleanup` need the tasks folder: a mistake there is reported before
    // any database is started, connected to or migrated.
    let cleanup = !cli.run.cleanup.is_empty();
    let tasks = match admin {
        None if cleanup || !cli.schema_only => Some(discover_tasks(&cli.run.tasks)?),
        _ => None,
    };
    let from_pg_env = || formica_tokio::pg_env_is_set().then(String::new);
    let (embedded, url) = match cli.connection.clone().or_else(from_pg_env) {
        Some(url) => (None, url),
        None => {
            let (embedded, url) = embedded::Embedded::start().map_err(Failure::Command)?;
            (Some(embedded), url)
        }
    };
    let result = run_command(cli, admin, tasks, &url, embedded.is_some()).await;
    if let Some(embedded) = embedded {
        embedded.stop();
    }
    result
}

/// What the command line asks for, on the database at `url` (the folder's `private` one, or
/// one given), with the folder's `tasks` when the worker or `--cleanup` needs them.
async fn run_command(
    cli: Cli,
    admin: Option<admin::Admin>,
    tasks: Option<exec::Discovered>,
    url: &str,
    private: bool,
) -> Result<(), Failure> {
    let cleanup = !cli.run.cleanup.is_empty();
    let tasks = match tasks {
        Some(found) if !cleanup => return run_worker(url, &cli.schema, cli.run, found).await,
        tasks => tasks,
    };
    let mut settings = ConnectionSettings::parse(url)?;
    settings.default_application_name("formica");
    let pool = Pool::new(Arc::new(formica_tokio::TokioRuntime), settings, 4);
    let utils = WorkerUtils::new(pool, cli.schema.clone());
    // Subcommands only read the ledger: a mistyped schema or database is refused, not
    // created; but the folder's private database is Formica's own, installed on first use.
    if !cli.run.no_migrate && (admin.is_none() || private) {
        utils.migrate().await?;
    } else {
        utils.check_migrated().await?;
    }
    let out = if cli.json { Output::Json } else { Output::Human };
    let reads = match &cli.read_connection {
        Some(url) => {
            let mut settings = ConnectionSettings::parse(url)?;
            settings.default_application_name("formica");
            WorkerUtils::new(
                Pool::new(Arc::new(formica_tokio::TokioRuntime), settings, 4),
                cli.schema.clone(),
            )
        }
        None => utils.clone(),
    };
    match (admin, tasks) {
        (Some(command), _) => admin::run(command, &utils, &reads, out).await,
        (None, Some(found)) => {
            // The folder's tasks are kept, as the worker that runs them would need them.
            let keep: Vec<&str> = found.tasks.keys().map(String::as_str).collect();
            utils.cleanup(&cli.run.cleanup, &keep).await?;
            tracing::info!(tasks = ?cli.run.cleanup, kept = ?keep, "cleaned up");
            Ok(())
        }
        (None, None) => {
            println!("Schema updated");
            Ok(())
        }
    }
}

/// Parse the command line, refusing a flag of the worker or `--schema-only` beside a
/// subcommand (`formica --once jobs`), which would otherwise be ignored. Every conversion of
/// a value (times, periods, counts) happens here, before any database is touched.
fn parse_from<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::{parser::ValueSource, Args, CommandFactory, FromArgMatches};
    let matches = Cli::command().try_get_matches_from(args)?;
    if let Some(subcommand) = matches.subcommand_name() {
        let worker = RunArgs::augment_args(clap::Command::new("formica"))
            .arg(clap::Arg::new("schema_only").long("schema-only"));
        let given = worker
            .get_arguments()
            .find(|arg| matches.value_source(arg.get_id().as_str()) == Some(ValueSource::CommandLine));
        if let Some(arg) = given {
            let flag = arg.get_long().map_or_else(|| arg.get_id().to_string(), |long| format!("--{long}"));
            return Err(Cli::command().error(
                clap::error::ErrorKind::ArgumentConflict,
                format!("{flag} applies without a subcommand: it cannot be used with `formica {subcommand}`"),
            ));
        }
    }
    Cli::from_arg_matches(&matches)
}

fn main() -> ExitCode {
    let mut cli = parse_from(std::env::args_os()).unwrap_or_else(|e| e.exit());
    let admin = match cli.command.take() {
        Some(Command::Crontab(command)) => {
            return match crontab::run(command, chrono::Utc::now()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(message) => {
                    eprintln!("formica: {}", output::visible_lines(&message));
                    ExitCode::FAILURE
                }
            };
        }
        Some(Command::Admin(admin)) => Some(admin),
        None => None,
    };
    init_logging(cli.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("formica: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(main_inner(cli, admin)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("formica: {}", output::visible_lines(&e.to_string()));
            match e {
                Failure::Formica(Error::Migrate(MigrateError::NewerBreaking { .. })) => {
                    ExitCode::from(EXIT_NEWER_SCHEMA)
                }
                Failure::Unhealthy(worst) => ExitCode::from(EXIT_UNHEALTHY + worst.level() as u8),
                _ => ExitCode::FAILURE,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    // Tests fail by panicking.
    #![allow(clippy::unwrap_used)]
    use super::*;
    use clap::CommandFactory;
    use proptest::prelude::*;

    /// Every subcommand's path (`[]` for the worker, `["schedule", "put"]`) with the long
    /// flags it takes (its own and the global ones).
    fn commands() -> Vec<(Vec<String>, Vec<String>)> {
        fn walk(
            command: &clap::Command,
            path: Vec<String>,
            global: &[String],
            out: &mut Vec<(Vec<String>, Vec<String>)>,
        ) {
            let mut flags: Vec<String> = global.to_vec();
            flags.extend(command.get_arguments().filter_map(|a| a.get_long()).map(|l| format!("--{l}")));
            out.push((path.clone(), flags.clone()));
            for sub in command.get_subcommands() {
                let mut path = path.clone();
                path.push(sub.get_name().to_owned());
                walk(sub, path, &flags, out);
            }
        }
        let mut out = Vec::new();
        walk(&Cli::command(), Vec::new(), &[], &mut out);
        out
    }

    /// Values that have broken parsers: huge and negative numbers with every unit, empty
    /// text, odd Unicode, times at chrono's edges.
    fn value() -> impl Strategy<Value = String> {
        let units = prop::sample::select(vec!["", "s", "m", "h", "d", "ms", "µs", "S", "e9"]);
        let numbers = prop_oneof![
            any::<i64>().prop_map(|n| n.to_string()),
            any::<u64>().prop_map(|n| n.to_string()),
            any::<i128>().prop_map(|n| n.to_string()),
            Just("100000000".to_owned()),
            Just("200000000000".to_owned()),
            Just("0".to_owned()),
        ];
        prop_oneof![
            4 => (numbers, units).prop_map(|(n, unit)| format!("{n}{unit}")),
            1 => Just(String::new()),
            1 => "\\PC{0,12}",
            1 => any::<String>(),
            1 => prop::sample::select(vec![
                "-262144-01-01T00:00:00Z", "+262143-12-31T23:59:59Z", "9999-12-31T23:59:59Z",
                "2030-01-31 09:30:00Z", "1970-01-01T00:00:00+23:59", "{}", "[1,", "null",
                "replace", "a,b,,c", ",", "-", "--", "127.0.0.1:99999", "::", "\u{0}", "🐜",
                "GC_JOB_QUEUES", "ready,scheduled,bogus",
            ])
            .prop_map(str::to_owned),
        ]
    }

    /// An argument list: a subcommand, then flags of it with or without values, and bare
    /// values (ids, keys, tasks).
    fn arguments() -> impl Strategy<Value = Vec<String>> {
        let commands = commands();
        (0..commands.len()).prop_flat_map(move |at| {
            let (path, flags) = commands[at].clone();
            // Parsing stops at the first refused value: the tokens are few, mostly a flag
            // with a value.
            let token = prop_oneof![
                1 => prop::sample::select(flags.clone()).prop_map(|f| vec![f]),
                4 => (prop::sample::select(flags), value()).prop_map(|(f, v)| vec![f, v]),
                1 => value().prop_map(|v| vec![v]),
            ];
            prop::collection::vec(token, 0..4).prop_map(move |tokens| {
                let mut args = vec!["formica".to_owned()];
                args.extend(path.iter().cloned());
                args.extend(tokens.into_iter().flatten());
                args
            })
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

        /// No argument list makes `formica` panic (exit 101) while its arguments are parsed
        /// and converted: a bad value is a clap error naming it.
        #[test]
        fn no_argument_list_makes_the_parser_panic(args in arguments()) {
            let given = args.clone();
            let parsed = std::panic::catch_unwind(move || parse_from(given).map(|_| ()));
            prop_assert!(parsed.is_ok(), "formica panicked parsing {args:?}");
        }
    }

    #[test]
    fn a_time_ago_beyond_the_calendar_is_an_error_naming_it() {
        for huge in ["100000000d", "200000000000d", "9223372036854775807s"] {
            for verb in ["retry", "delete", "cancel", "reschedule"] {
                let e = parse_from(["formica", verb, "--since", huge]).map(|_| ()).unwrap_err();
                assert!(e.to_string().contains(huge), "{verb} --since {huge}: {e}");
            }
        }
    }
}
