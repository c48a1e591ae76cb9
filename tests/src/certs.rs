//! Certificates for TLS tests, made at test time with the `openssl` command: a certificate
//! authority, a server certificate it signs (for `127.0.0.1` and the name
//! `formica-test-server`, deliberately not `localhost`, so connecting as `localhost` is a
//! host name mismatch), a client certificate for the user `postgres`, and a second,
//! unrelated authority.

use crate::cluster::PrivateCluster;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The files, in a temporary folder deleted on drop.
pub struct TestCerts {
    dir: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl (the TLS tests need the openssl command: apt-get install openssl)");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

impl TestCerts {
    /// Generate every file.
    pub fn generate() -> TestCerts {
        static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("formica-certs-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the certificates folder");
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
        for (name, subject) in [("ca", "/CN=Formica test CA"), ("wrong-ca", "/CN=Some other CA")] {
            let (key, crt) = (format!("{name}.key"), format!("{name}.crt"));
            let mut args =
                vec!["req", "-x509", "-days", "2", "-subj", subject, "-keyout", &key, "-out", &crt];
            args.extend(ec);
            args.extend([
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign",
            ]);
            openssl(&dir, &args);
        }
        let sign = |name: &str, subject: &str, extensions: &str| {
            let (key, csr, crt, ext) =
                (format!("{name}.key"), format!("{name}.csr"), format!("{name}.crt"), format!("{name}.ext"));
            std::fs::write(dir.join(&ext), extensions).expect("write extensions");
            let mut args = vec!["req", "-new", "-subj", subject, "-keyout", &key, "-out", &csr];
            args.extend(ec);
            openssl(&dir, &args);
            openssl(
                &dir,
                &[
                    "x509",
                    "-req",
                    "-in",
                    &csr,
                    "-CA",
                    "ca.crt",
                    "-CAkey",
                    "ca.key",
                    "-CAcreateserial",
                    "-days",
                    "2",
                    "-out",
                    &crt,
                    "-extfile",
                    &ext,
                ],
            );
        };
        sign(
            "server",
            "/CN=formica-test-server",
            "subjectAltName=DNS:formica-test-server,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
        );
        sign("client", "/CN=postgres", "extendedKeyUsage=clientAuth\n");
        TestCerts { dir }
    }

    /// The path of `name` (`ca.crt`, `wrong-ca.crt`, `server.crt`, `server.key`,
    /// `client.crt`, `client.key`).
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Copy the server's certificate, key and the authority into `data` (a cluster's data
    /// folder), the key readable by its owner alone as PostgreSQL demands.
    pub fn install_server(&self, data: &Path) {
        for name in ["server.crt", "server.key", "ca.crt"] {
            std::fs::copy(self.path(name), data.join(name)).expect("copy a certificate file");
        }
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(data.join("server.key"), std::fs::Permissions::from_mode(0o600))
            .expect("chmod the server key");
    }
}

impl Drop for TestCerts {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// How the TLS cluster lets clients in: plain connections are trusted; the database
/// `certonly` takes TLS with a client certificate naming the user, and nothing else; the
/// database `passwordonly` takes a password (SCRAM).
const HBA: &str = "local all all trust\n\
                   hostssl certonly all 127.0.0.1/32 cert\n\
                   host certonly all 127.0.0.1/32 reject\n\
                   host passwordonly all 127.0.0.1/32 scram-sha-256\n\
                   host all all 127.0.0.1/32 trust\n";

/// A private cluster with `ssl=on`, serving `certs`' server certificate (see `HBA` in this module).
pub fn tls_cluster(certs: &TestCerts) -> PrivateCluster {
    PrivateCluster::start_with(
        &[
            ("ssl", "on"),
            ("ssl_cert_file", "server.crt"),
            ("ssl_key_file", "server.key"),
            ("ssl_ca_file", "ca.crt"),
        ],
        |data| {
            certs.install_server(data);
            std::fs::write(data.join("pg_hba.conf"), HBA).expect("write pg_hba.conf");
        },
    )
}
