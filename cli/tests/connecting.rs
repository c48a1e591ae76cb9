//! The `formica` command connecting the ways libpq's users do: the `PG*` variables (TLS
//! included), a socket directory in `PGHOST`, the password file, and `application_name`.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use formica_tests::certs::{tls_cluster, TestCerts};
use formica_tests::cluster::PrivateCluster;
use std::path::Path;
use std::process::{Command, Output};

/// `formica args` with only the `PG*` variables `env` (no DATABASE_URL) naming the server.
fn formica_with_env(env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_formica"));
    command.args(args).env("RUST_LOG", "warn").env_remove("DATABASE_URL");
    for (name, _) in std::env::vars() {
        if name.starts_with("PG") {
            command.env_remove(name);
        }
    }
    command.envs(env.iter().copied()).output().expect("run formica")
}

/// `base` with `extra` added (a later setting wins).
fn with<'a>(base: &[(&'a str, &'a str)], extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    base.iter().chain(extra).copied().collect()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn pg_variables_connect_over_tls_and_refuse_a_wrong_authority() {
    let certs = TestCerts::generate();
    let cluster = tls_cluster(&certs);
    let port = cluster.port().to_string();
    let ca = certs.path("ca.crt").display().to_string();
    let wrong = certs.path("wrong-ca.crt").display().to_string();
    let base = [
        ("PGHOST", "127.0.0.1"),
        ("PGPORT", port.as_str()),
        ("PGUSER", "postgres"),
        ("PGDATABASE", "postgres"),
    ];

    let out = formica_with_env(
        &with(&base, &[("PGSSLMODE", "verify-full"), ("PGSSLROOTCERT", &ca)]),
        &["--schema-only"],
    );
    assert!(out.status.success(), "{}", stderr(&out));

    let out = formica_with_env(
        &with(&base, &[("PGSSLMODE", "verify-full"), ("PGSSLROOTCERT", &wrong)]),
        &["--schema-only"],
    );
    assert!(!out.status.success());
    assert!(stderr(&out).contains("the server's certificate is not trusted"), "{}", stderr(&out));

    // A client certificate through PGSSLCERT/PGSSLKEY.
    let (cert, key) =
        (certs.path("client.crt").display().to_string(), certs.path("client.key").display().to_string());
    run_sql(&cluster, "create database certonly");
    let out = formica_with_env(
        &with(&base, &[("PGDATABASE", "certonly"), ("PGSSLMODE", "verify-ca"), ("PGSSLROOTCERT", &ca)]),
        &["--schema-only"],
    );
    assert!(!out.status.success(), "certonly needs a client certificate");
    let out = formica_with_env(
        &with(
            &base,
            &[
                ("PGDATABASE", "certonly"),
                ("PGSSLMODE", "verify-ca"),
                ("PGSSLROOTCERT", &ca),
                ("PGSSLCERT", &cert),
                ("PGSSLKEY", &key),
            ],
        ),
        &["--schema-only"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn a_socket_directory_in_pghost_and_the_password_file() {
    let certs = TestCerts::generate();
    let cluster = tls_cluster(&certs);
    let port = cluster.port().to_string();
    let socket_dir = cluster.dir().display().to_string();
    let env = [("PGHOST", socket_dir.as_str()), ("PGPORT", port.as_str()), ("PGUSER", "postgres")];
    let out = formica_with_env(&env, &["--schema-only"]);
    assert!(out.status.success(), "PGHOST as a socket directory: {}", stderr(&out));

    run_sql(&cluster, "create database passwordonly");
    run_sql(&cluster, "alter user postgres password 'pass:word'");
    let tcp = [
        ("PGHOST", "127.0.0.1"),
        ("PGPORT", port.as_str()),
        ("PGUSER", "postgres"),
        ("PGDATABASE", "passwordonly"),
    ];
    let out = formica_with_env(&tcp, &["--schema-only"]);
    assert!(!out.status.success(), "passwordonly needs a password");

    let passfile = cluster.dir().join("pgpass");
    std::fs::write(
        &passfile,
        format!("# host:port:db:user:password\n127.0.0.1:{port}:passwordonly:postgres:pass\\:word\n"),
    )
    .unwrap();
    set_mode(&passfile, 0o600);
    let passfile_str = passfile.display().to_string();
    let with_file: Vec<(&str, &str)> =
        tcp.iter().copied().chain([("PGPASSFILE", passfile_str.as_str())]).collect();
    let out = formica_with_env(&with_file, &["--schema-only"]);
    assert!(out.status.success(), "the password from PGPASSFILE: {}", stderr(&out));

    // libpq ignores a password file others can read.
    set_mode(&passfile, 0o644);
    let out = formica_with_env(&with_file, &["--schema-only"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("password file has group or world access"), "{}", stderr(&out));

    let with_password: Vec<(&str, &str)> = tcp.iter().copied().chain([("PGPASSWORD", "pass:word")]).collect();
    let out = formica_with_env(&with_password, &["--schema-only"]);
    assert!(out.status.success(), "PGPASSWORD: {}", stderr(&out));
}

/// Run `sql` on the cluster's `postgres` database (plain, trusted).
fn run_sql(cluster: &PrivateCluster, sql: &str) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    rt.block_on(async {
        let client = formica_tests::connect(&formica_tokio::TokioRuntime, &cluster.url("postgres")).await;
        client.batch_execute(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    });
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}
