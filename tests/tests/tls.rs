//! TLS against a real PostgreSQL with `ssl=on` and a certificate authority made by the test:
//! each `sslmode`, refusals that say why, client certificates, and workers draining jobs
//! over TLS on both runtimes.

use formica::{ConnectionSettings, JobSpec, Runtime, WorkerUtils};
use formica_tests::certs::{tls_cluster, TestCerts};
use formica_tests::cluster::PrivateCluster;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Connect with `settings` (words added to the cluster's) and say whether the session is
/// encrypted, or why connecting failed.
async fn ssl_in_use(
    rt: &dyn Runtime,
    cluster: &PrivateCluster,
    host: &str,
    settings: &str,
) -> Result<bool, String> {
    let text = format!("host={host} port={} user=postgres dbname=postgres {settings}", cluster.port());
    let settings = ConnectionSettings::parse(&text).map_err(|e| e.to_string())?;
    let client = formica::connect(rt, &settings).await.map_err(|e| e.to_string())?;
    let row = client
        .query_one("select ssl from pg_stat_ssl where pid = pg_backend_pid()", &[])
        .await
        .map_err(|e| e.to_string())?;
    Ok(row.get(0))
}

fn expect_error(result: Result<bool, String>, words: &str) {
    match result {
        Ok(ssl) => panic!("expected an error saying {words:?}, connected (ssl={ssl})"),
        Err(e) => assert!(e.contains(words), "expected an error saying {words:?}, got: {e}"),
    }
}

#[tokio::test]
async fn each_sslmode_against_a_tls_server() {
    let rt = formica_tokio::TokioRuntime;
    let certs = TestCerts::generate();
    let cluster = tls_cluster(&certs);
    let ca = certs.path("ca.crt");
    let ca = ca.display();
    let wrong_ca = certs.path("wrong-ca.crt");
    let wrong_ca = wrong_ca.display();
    let ip = "127.0.0.1";

    assert_eq!(ssl_in_use(&rt, &cluster, ip, "sslmode=disable").await, Ok(false));
    assert_eq!(
        ssl_in_use(&rt, &cluster, ip, "").await,
        Ok(true),
        "prefer (the default) uses TLS when offered"
    );
    assert_eq!(ssl_in_use(&rt, &cluster, ip, "sslmode=prefer").await, Ok(true));
    assert_eq!(ssl_in_use(&rt, &cluster, ip, "sslmode=require").await, Ok(true));
    assert_eq!(ssl_in_use(&rt, &cluster, ip, &format!("sslmode=verify-ca sslrootcert={ca}")).await, Ok(true));
    assert_eq!(
        ssl_in_use(&rt, &cluster, ip, &format!("sslmode=verify-full sslrootcert={ca}")).await,
        Ok(true)
    );
    // The URL form and node-postgres's `ssl=true`.
    let url = format!("postgres://postgres@127.0.0.1:{}/postgres?ssl=true", cluster.port());
    let client = formica::connect(&rt, &ConnectionSettings::parse(&url).unwrap()).await.unwrap();
    let row =
        client.query_one("select ssl from pg_stat_ssl where pid = pg_backend_pid()", &[]).await.unwrap();
    assert!(row.get::<_, bool>(0));

    // A certificate authority that did not sign the server's certificate.
    for mode in ["verify-ca", "verify-full", "require"] {
        expect_error(
            ssl_in_use(&rt, &cluster, ip, &format!("sslmode={mode} sslrootcert={wrong_ca}")).await,
            "the server's certificate is not trusted",
        );
    }
    // `localhost` reaches the server, but its certificate does not name it.
    expect_error(
        ssl_in_use(&rt, &cluster, "localhost", &format!("sslmode=verify-full sslrootcert={ca}")).await,
        "does not match the host name \"localhost\"",
    );
    assert_eq!(
        ssl_in_use(&rt, &cluster, "localhost", &format!("sslmode=verify-ca sslrootcert={ca}")).await,
        Ok(true),
        "verify-ca does not check the name"
    );
    // The platform's roots do not include the test's authority (if the machine has none,
    // the settings say so instead).
    match ssl_in_use(&rt, &cluster, ip, "sslmode=verify-full sslrootcert=system").await {
        Err(e) if e.contains("no trusted roots found on this machine") => {}
        other => expect_error(other, "not signed by a certificate authority of the system's trusted roots"),
    }
    // A Unix socket never uses TLS, whatever the mode.
    let socket = cluster.dir().display().to_string();
    assert_eq!(ssl_in_use(&rt, &cluster, &socket, "sslmode=require").await, Ok(false));

    // A client certificate where pg_hba.conf demands one.
    let admin =
        formica::connect(&rt, &ConnectionSettings::parse(&cluster.url("postgres")).unwrap()).await.unwrap();
    admin.batch_execute("create database certonly").await.unwrap();
    let certonly = |extra: String| {
        format!("host=127.0.0.1 port={} user=postgres dbname=certonly sslmode=verify-full sslrootcert={ca} {extra}", cluster.port())
    };
    let without = ConnectionSettings::parse(&certonly(String::new())).unwrap();
    let Err(e) = formica::connect(&rt, &without).await else {
        panic!("refused without a client certificate")
    };
    assert!(e.to_string().contains("certificate"), "{e}");
    let with = ConnectionSettings::parse(&certonly(format!(
        "sslcert={} sslkey={}",
        certs.path("client.crt").display(),
        certs.path("client.key").display()
    )))
    .unwrap();
    let client = formica::connect(&rt, &with).await.expect("a client certificate is accepted");
    let name: String = client.query_one("select current_database()", &[]).await.unwrap().get(0);
    assert_eq!(name, "certonly");
}

#[tokio::test]
async fn require_against_a_server_without_tls_says_so() {
    let db = formica_tests::TestDb::new().await;
    let settings = ConnectionSettings::parse(&format!("{} sslmode=require", db.url)).unwrap();
    let Err(e) = formica::connect(db.runtime.as_ref(), &settings).await else { panic!("refused") };
    assert!(e.to_string().contains("the server does not offer TLS"), "{e}");
}

async fn worker_drains_jobs_over_tls(rt: Arc<dyn Runtime>) {
    let certs = TestCerts::generate();
    let cluster = tls_cluster(&certs);
    let url = format!(
        "{} sslmode=verify-full sslrootcert={}",
        cluster.url("postgres"),
        certs.path("ca.crt").display()
    );
    let utils = WorkerUtils::new(formica::Pool::from_url(rt.clone(), &url, 2).unwrap(), "graphile_worker");
    utils.migrate().await.unwrap();
    for n in 0..50 {
        utils.add_raw_job("count", serde_json::json!({ "n": n }), JobSpec::default()).await.unwrap();
    }
    let ran = Arc::new(AtomicUsize::new(0));
    let counter = ran.clone();
    let worker = formica::WorkerOptions::<()>::with_runtime(rt.clone())
        .database_url(&url)
        .define_raw_job("count", move |_, _| {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        })
        .init()
        .await
        .unwrap();
    formica_tests::timeout(rt.as_ref(), Duration::from_secs(60), worker.run_once())
        .await
        .expect("drained in time")
        .unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 50);
    let client = utils.pool().get().await.unwrap();
    let unencrypted: i64 = client
        .query_one(
            "select count(*) from pg_stat_ssl s join pg_stat_activity a using (pid) \
             where a.backend_type = 'client backend' and not s.ssl",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(unencrypted, 0, "every session is encrypted");
}

formica_tests::on_both_runtimes!(worker_drains_jobs_over_tls);

/// The response watch (`tcp_user_timeout`) reads the protocol: it must find it inside TLS,
/// and after a server declined TLS (`prefer`'s `SSLRequest` answered `N`). An idle
/// connection is left alone; a hung one fails instead of hanging. `extra`: settings added to
/// `url` once it points at the proxy.
async fn check_watch(rt: Arc<dyn Runtime>, url: &str, extra: &str, expect_ssl: bool) {
    let (proxy, through) = formica_tests::proxy::Proxy::in_front_of(url);
    let settings = ConnectionSettings::parse(&format!("{through} {extra} tcp_user_timeout=1")).unwrap();
    let client = formica::connect_watched(rt.clone(), &settings).await.unwrap();
    let ssl: bool = client
        .query_one("select ssl from pg_stat_ssl where pid = pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(ssl, expect_ssl);
    formica_tests::sleep(rt.as_ref(), Duration::from_millis(2500)).await;
    client.query_one("select 1", &[]).await.expect("an idle connection is not timed out");
    proxy.freeze_all();
    let result =
        formica_tests::timeout(rt.as_ref(), Duration::from_secs(10), client.query_one("select 2", &[]))
            .await
            .expect("a hung connection fails, it does not hang");
    // The watch closes the connection (its task logs why); the statement sees it closed.
    let Err(e) = result else { panic!("a frozen connection answered") };
    assert!(e.is_closed(), "{e}");
}

#[tokio::test]
async fn the_response_watch_works_inside_tls_and_after_tls_is_declined() {
    let rt: Arc<dyn Runtime> = Arc::new(formica_tokio::TokioRuntime);
    let plain = formica_tests::TestDb::new().await;
    check_watch(rt.clone(), &plain.url, "", false).await;
    let certs = TestCerts::generate();
    let cluster = tls_cluster(&certs);
    let extra = format!("sslmode=verify-full sslrootcert={}", certs.path("ca.crt").display());
    check_watch(rt, &cluster.url("postgres"), &extra, true).await;
}

/// Run `openssl` with the words of `args` in `dir`; its output.
fn openssl(dir: &std::path::Path, args: &str) -> String {
    let args: Vec<&str> = args.split_whitespace().collect();
    let out =
        std::process::Command::new("openssl").args(&args).current_dir(dir).output().expect("run openssl");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const EC_KEY: &str = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";

/// A self-signed certificate `name.crt` (and its key) made the usual way, as PostgreSQL's
/// documentation shows: `openssl req -x509`, which marks it a CA (CA:TRUE).
fn self_signed(dir: &std::path::Path, name: &str) {
    openssl(
        dir,
        &format!(
            "req -x509 {EC_KEY} -days 2 -subj /CN=formica-test-server \
             -addext subjectAltName=DNS:formica-test-server,IP:127.0.0.1 -keyout {name}.key -out {name}.crt"
        ),
    );
    let text = openssl(dir, &format!("x509 -in {name}.crt -noout -text"));
    assert!(text.contains("CA:TRUE"), "openssl req -x509 makes a CA certificate: {text}");
}

/// An expired self-signed CA:TRUE certificate `name.crt` (and its key), valid on 1 January
/// 2020 only (`openssl req` cannot date one in the past; `openssl ca` can).
fn expired_self_signed(dir: &std::path::Path, name: &str) {
    let config =
        "[ca]\ndefault_ca = self\n[self]\ndatabase = index.txt\nnew_certs_dir = .\nserial = serial\n\
                  default_md = sha256\npolicy = any\nx509_extensions = ext\n[any]\ncommonName = supplied\n\
                  [ext]\nbasicConstraints = critical,CA:TRUE\nsubjectAltName = IP:127.0.0.1\n";
    std::fs::write(dir.join("ca.cnf"), config).unwrap();
    std::fs::write(dir.join("index.txt"), "").unwrap();
    std::fs::write(dir.join("serial"), "01\n").unwrap();
    openssl(
        dir,
        &format!("req -new {EC_KEY} -subj /CN=formica-test-server -keyout {name}.key -out {name}.csr"),
    );
    openssl(
        dir,
        &format!(
            "ca -batch -selfsign -config ca.cnf -keyfile {name}.key -in {name}.csr \
             -startdate 20200101000000Z -enddate 20200102000000Z -out {name}.crt"
        ),
    );
}

/// A private cluster with `ssl=on`, serving `name.crt` of `dir`, letting in any
/// connection from 127.0.0.1.
fn serving(dir: &std::path::Path, name: &str) -> PrivateCluster {
    let (crt, key) = (format!("{name}.crt"), format!("{name}.key"));
    PrivateCluster::start_with(
        &[("ssl", "on"), ("ssl_cert_file", "server.crt"), ("ssl_key_file", "server.key")],
        |data| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::copy(dir.join(crt), data.join("server.crt")).unwrap();
            std::fs::copy(dir.join(key), data.join("server.key")).unwrap();
            std::fs::set_permissions(data.join("server.key"), std::fs::Permissions::from_mode(0o600))
                .unwrap();
            std::fs::write(
                data.join("pg_hba.conf"),
                "local all all trust\nhost all all 127.0.0.1/32 trust\n",
            )
            .unwrap();
        },
    )
}

#[tokio::test]
async fn a_self_signed_server_certificate_made_by_openssl_req_x509_with_each_sslmode() {
    let rt = formica_tokio::TokioRuntime;
    let dir = std::env::temp_dir().join(format!("formica-self-signed-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    self_signed(&dir, "server");
    self_signed(&dir, "other");
    let cluster = serving(&dir, "server");
    let (cert, other) = (dir.join("server.crt"), dir.join("other.crt"));
    let (cert, other) = (cert.display(), other.display());
    let ip = "127.0.0.1";

    assert_eq!(ssl_in_use(&rt, &cluster, ip, "sslmode=disable").await, Ok(false));
    for mode in ["prefer", "require"] {
        assert_eq!(ssl_in_use(&rt, &cluster, ip, &format!("sslmode={mode}")).await, Ok(true), "{mode}");
    }
    // As libpq: the server's own certificate as the trusted root (`require` with a root
    // given checks as `verify-ca`).
    for mode in ["require", "verify-ca", "verify-full"] {
        let settings = format!("sslmode={mode} sslrootcert={cert}");
        assert_eq!(ssl_in_use(&rt, &cluster, ip, &settings).await, Ok(true), "{mode}");
    }
    // verify-full still checks the names: `localhost` is not one of them.
    expect_error(
        ssl_in_use(&rt, &cluster, "localhost", &format!("sslmode=verify-full sslrootcert={cert}")).await,
        "does not match the host name \"localhost\"",
    );
    assert_eq!(
        ssl_in_use(&rt, &cluster, "localhost", &format!("sslmode=verify-ca sslrootcert={cert}")).await,
        Ok(true)
    );
    // Another self-signed certificate as the root: refused, saying what to put there.
    for mode in ["require", "verify-ca", "verify-full"] {
        expect_error(
            ssl_in_use(&rt, &cluster, ip, &format!("sslmode={mode} sslrootcert={other}")).await,
            "it is a self-signed or CA certificate (CA:TRUE, as `openssl req -x509` makes) that is not in \
             sslrootcert",
        );
    }

    // Accepting the trusted certificate itself still checks its dates.
    expired_self_signed(&dir, "expired");
    let cluster = serving(&dir, "expired");
    let expired = dir.join("expired.crt");
    for mode in ["verify-ca", "verify-full"] {
        expect_error(
            ssl_in_use(&rt, &cluster, ip, &format!("sslmode={mode} sslrootcert={}", expired.display())).await,
            "the server's certificate has expired",
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
