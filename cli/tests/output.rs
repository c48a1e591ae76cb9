//! Quiet and honest output: no PostgreSQL notices unless asked for, and log levels an alert
//! can rely on (ERROR once a job has failed for good, WARN for a failure that is retried).

// Tests fail by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use formica_tests::TestDb;
use serde_json::Value;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

fn formica(db: &TestDb, args: &[&str], rust_log: &str) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_formica"))
        .args(["-c", &db.url])
        .args(args)
        .env("RUST_LOG", rust_log)
        .output()
        .expect("run formica");
    assert!(out.status.success(), "formica {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    out
}

#[tokio::test]
async fn a_cli_run_prints_no_server_notice() {
    let db = TestDb::new().await;
    // Installing, installing again (`create schema if not exists` and the like on existing
    // objects make the server send NOTICEs), and reading.
    for args in [&["--schema-only"][..], &["--schema-only"], &["jobs"], &["status"]] {
        for format in ["text", "json"] {
            let out = formica(&db, &[args, &["--log-format", format]].concat(), "info");
            let logs = String::from_utf8(out.stderr).unwrap();
            assert!(!logs.contains("NOTICE"), "formica {args:?} printed a notice: {logs}");
            assert!(!logs.contains("already exists"), "formica {args:?} printed a notice: {logs}");
            assert!(!logs.contains("tokio_postgres"), "formica {args:?}: {logs}");
        }
    }
}

/// The events logged in this process: (level, target, message).
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<(tracing::Level, String, String)>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Captured {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Message(String);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.0 = format!("{value:?}");
                }
            }
        }
        let mut message = Message(String::new());
        event.record(&mut message);
        let meta = event.metadata();
        self.0.lock().unwrap().push((*meta.level(), meta.target().to_owned(), message.0));
    }
}

#[tokio::test]
async fn server_notices_are_logged_at_debug_and_warnings_at_warn_with_the_server_s_words() {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let db = TestDb::new().await;
    // The only test of this file logging in its process. As the CLI's, `init` routes the
    // `log` crate's records (tokio-postgres's) to tracing too.
    let captured = Captured::default();
    tracing_subscriber::registry().with(captured.clone()).init();

    let settings = formica_tokio::ConnectionSettings::parse(&db.url).unwrap();
    let client = formica_tokio::connect(db.runtime.as_ref(), &settings).await.unwrap();
    client
        .batch_execute("do $$ begin raise notice 'just so you know'; raise warning 'careful now'; end $$")
        .await
        .unwrap();
    // The notices come before the statement's answer, on the connection's task: one more
    // round trip lets that task log them.
    client.batch_execute("select 1").await.unwrap();

    let events = captured.0.lock().unwrap().clone();
    // tokio-postgres's own DEBUG line echoes the statement: not a notice.
    let echo = |level: &tracing::Level, target: &str| target == "log" && *level >= tracing::Level::DEBUG;
    let about = |words: &str| {
        let told = events.iter().filter(|(level, target, m)| m.contains(words) && !echo(level, target));
        told.cloned().collect::<Vec<_>>()
    };
    assert_eq!(
        about("just so you know"),
        [(tracing::Level::DEBUG, "formica::notice".to_owned(), "PostgreSQL: just so you know".to_owned())],
        "{events:?}"
    );
    assert_eq!(
        about("careful now"),
        [(tracing::Level::WARN, "formica::notice".to_owned(), "PostgreSQL: careful now".to_owned())],
        "{events:?}"
    );
}

#[tokio::test]
async fn a_task_program_s_retried_failure_logs_warn_and_its_last_one_error() {
    use std::os::unix::fs::PermissionsExt;
    let db = TestDb::migrated().await;
    let dir = std::env::temp_dir().join(format!("formica-cli-levels-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("fail.sh"), "#!/bin/sh\necho 'the disk is on fire' >&2\nexit 3\n").unwrap();
    std::fs::set_permissions(dir.join("fail.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let utils = db.utils();
    let add = |max_attempts| {
        let spec = formica_tokio::JobSpec::builder().max_attempts(max_attempts).build();
        let utils = utils.clone();
        async move { utils.add_raw_job("fail", serde_json::json!({}), spec).await.unwrap().id }
    };
    let (retried, last) = (add(5).await, add(1).await);

    let out = formica(&db, &["--once", "--tasks", dir.to_str().unwrap(), "--log-format", "json"], "info");
    let logs = String::from_utf8(out.stderr).unwrap();
    let lines: Vec<Value> = logs
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    let at = |level: &str| lines.iter().filter(|l| l["level"] == level).collect::<Vec<_>>();
    let errors = at("ERROR");
    assert_eq!(errors.len(), 1, "one ERROR line, for the job out of attempts: {logs}");
    assert_eq!(errors[0]["job_id"], last, "{logs}");
    assert_eq!(errors[0]["message"], "job failed permanently (out of attempts)", "{logs}");
    let retry = lines.iter().find(|l| l["job_id"] == retried).expect("a line for the retried job");
    assert_eq!((&retry["level"], &retry["message"]), (&"WARN".into(), &"job failed, will retry".into()));
    // The programs' stderr, each line logged as it comes, before anyone knows the outcome.
    let stderr: Vec<_> = lines.iter().filter(|l| l["message"] == "the disk is on fire").collect();
    assert_eq!(stderr.len(), 2, "{logs}");
    assert!(stderr.iter().all(|l| l["level"] == "WARN"), "{logs}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn help_groups_the_global_flags_and_the_worker_s_apart_from_a_subcommand_s_own() {
    let help = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_formica")).args(args).output().expect("run formica");
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    // The flags under each heading, in the help's order.
    let sections = |text: &str| {
        let mut sections: Vec<(String, Vec<String>)> = Vec::new();
        for line in text.lines() {
            if let Some(heading) = line.strip_suffix(':').filter(|l| !l.starts_with(' ')) {
                sections.push((heading.to_owned(), Vec::new()));
            } else if let (Some((_, flags)), Some(flag)) =
                (sections.last_mut(), line.split_whitespace().find(|w| w.starts_with("--")))
            {
                flags.push(flag.trim_end_matches(',').to_owned());
            }
        }
        sections
    };
    let top = sections(&help(&["--help"]));
    let flags_of = |sections: &[(String, Vec<String>)], heading: &str| {
        sections.iter().find(|(h, _)| h == heading).map(|(_, flags)| flags.clone()).unwrap_or_default()
    };
    let worker = flags_of(&top, "Worker options");
    for flag in ["--schema-only", "--once", "--tasks", "--jobs", "--crontab"] {
        assert!(worker.contains(&flag.to_owned()), "{flag} under Worker options: {top:?}");
    }
    let global = flags_of(&top, "Global options");
    assert_eq!(
        global,
        ["--connection", "--read-connection", "--schema", "--json", "--log-format"],
        "{top:?}"
    );

    let jobs = sections(&help(&["jobs", "--help"]));
    assert_eq!(flags_of(&jobs, "Global options"), global, "{jobs:?}");
    assert!(flags_of(&jobs, "Options").contains(&"--task".to_owned()), "{jobs:?}");
    assert!(flags_of(&jobs, "Worker options").is_empty(), "{jobs:?}");
}
