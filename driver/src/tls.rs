//! TLS for connections to PostgreSQL, with libpq's `sslmode` meanings, over rustls.
//!
//! rustls is pure Rust (nothing to install, no OpenSSL version to match) and speaks tokio's
//! I/O traits through tokio-rustls without needing a tokio runtime, so the one
//! [`TlsConnect`] here serves every adapter: the handshake runs over the runtime's socket
//! inside `Config::connect_raw`.
//!
//! What each mode checks (as libpq):
//!
//! - `disable`: no TLS.
//! - `prefer` (the default): TLS when the server offers it, without checking its
//!   certificate; plain text otherwise.
//! - `require`: TLS or no connection; the certificate is not checked, unless `sslrootcert`
//!   is given, which makes it `verify-ca`.
//! - `verify-ca`: the certificate must chain to a root of `sslrootcert`.
//! - `verify-full`: that, and the certificate must name the host connected to.
//!
//! Unix sockets never use TLS. A handshake failure is told in words (not trusted, wrong
//! host name, expired) with the setting to look at.

use crate::runtime::Address;
use crate::watch::{Watch, Watched};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{verify_server_name, WebPkiServerVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, TlsConnect, TlsStream};

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// No TLS.
    Disable,
    /// TLS when the server offers it, certificate not checked.
    Prefer,
    /// TLS always, certificate not checked.
    Require,
    /// TLS always, certificate signed by a trusted root.
    VerifyCa,
    /// TLS always, certificate signed by a trusted root and naming the host.
    VerifyFull,
}

impl SslMode {
    /// Parse libpq's word for the mode.
    pub fn parse(word: &str) -> Option<SslMode> {
        Some(match word {
            "disable" => SslMode::Disable,
            "allow" | "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return None,
        })
    }

    /// libpq's word for the mode.
    pub fn word(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

/// Where the trusted roots come from (`sslrootcert`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootCert {
    /// A PEM file of certificate authorities.
    File(PathBuf),
    /// The platform's trusted roots (`sslrootcert=system`).
    System,
}

/// The TLS part of the connection settings, ready to connect with.
#[derive(Clone)]
pub struct Tls {
    mode: SslMode,
    roots: Option<RootCert>,
    config: Option<Arc<ClientConfig>>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("mode", &self.mode).field("roots", &self.roots).finish()
    }
}

impl Tls {
    /// No TLS.
    pub fn disabled() -> Self {
        Tls { mode: SslMode::Disable, roots: None, config: None }
    }

    /// TLS in `mode`, trusting `roots`, presenting `client` (certificate and key files) if
    /// the server asks. Reads the files now, so a missing or bad one is an error here.
    pub fn new(
        mut mode: SslMode,
        roots: Option<RootCert>,
        client: Option<(PathBuf, PathBuf)>,
    ) -> Result<Self, String> {
        if mode == SslMode::Disable {
            return Ok(Tls::disabled());
        }
        // libpq: `require` with a root certificate given checks the chain.
        if mode == SslMode::Require && roots.is_some() {
            mode = SslMode::VerifyCa;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let webpki = match mode {
            SslMode::Disable | SslMode::Prefer | SslMode::Require => None,
            SslMode::VerifyCa | SslMode::VerifyFull => {
                let Some(roots) = &roots else {
                    return Err(format!(
                        "sslmode={} needs trusted roots: set sslrootcert to a CA file, or to `system` for the platform's",
                        mode.word()
                    ));
                };
                let (store, trusted) = root_store(roots)?;
                let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider.clone())
                    .build()
                    .map_err(|e| format!("sslrootcert: {e}"))?;
                Some(Checked { webpki, trusted, check_name: mode == SslMode::VerifyFull })
            }
        };
        let verifier = Arc::new(Verifier { provider: provider.clone(), webpki });
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS setup: {e}"))?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let config = match client {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let certs = CertificateDer::pem_file_iter(&cert)
                    .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                    .map_err(|e| format!("sslcert {}: {e}", cert.display()))?;
                let key = PrivateKeyDer::from_pem_file(&key)
                    .map_err(|e| format!("sslkey {}: {e}", key.display()))?;
                builder.with_client_auth_cert(certs, key).map_err(|e| format!("sslcert/sslkey: {e}"))?
            }
        };
        Ok(Tls { mode, roots, config: Some(Arc::new(config)) })
    }

    /// The mode in effect.
    pub fn mode(&self) -> SslMode {
        self.mode
    }

    /// The connector for one connection to `host` (a TCP host name or address), watching
    /// the stream inside TLS with `watch` (see the `watch` module).
    pub(crate) fn connector(&self, host: &str, watch: Watch) -> Result<Connector, String> {
        let server_name = ServerName::try_from(host.to_owned())
            .map_err(|_| format!("{host:?} is not a valid host name for TLS"))?;
        Ok(Connector { config: self.config.clone(), server_name, watch })
    }
}

/// The store of trusted roots, and the certificates of an `sslrootcert` file as they are
/// (see [`Verified`]).
fn root_store(roots: &RootCert) -> Result<(RootCertStore, Vec<CertificateDer<'static>>), String> {
    let mut store = RootCertStore::empty();
    let mut trusted = Vec::new();
    match roots {
        RootCert::File(path) => {
            let certs = read_certs(path).map_err(|e| format!("sslrootcert {}: {e}", path.display()))?;
            trusted.clone_from(&certs);
            let (added, _) = store.add_parsable_certificates(certs);
            if added == 0 {
                return Err(format!("sslrootcert {}: no usable certificate in the file", path.display()));
            }
        }
        RootCert::System => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                let why = found.errors.first().map(|e| format!(": {e}")).unwrap_or_default();
                return Err(format!("sslrootcert=system: no trusted roots found on this machine{why}"));
            }
        }
    }
    Ok((store, trusted))
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, rustls::pki_types::pem::Error> {
    CertificateDer::pem_file_iter(path)?.collect()
}

/// The server's certificate check: any certificate under `prefer` and `require` (`webpki`
/// none), WebPKI against the roots under `verify-ca` (which forgives a name mismatch) and
/// `verify-full`. Either way the handshake's signature proves the server holds its key.
///
/// As libpq (OpenSSL), a server certificate that is itself one of the `sslrootcert` file's
/// certificates, byte for byte, is accepted: a self-signed one made with `openssl req -x509`
/// is marked CA:TRUE, which WebPKI refuses as a server's (`CaUsedAsEndEntity`). That is
/// safe: the operator named this very certificate as trusted, the handshake's signature
/// proves the server holds its private key, and WebPKI checked its validity period before
/// refusing it (an expired one is refused as expired); `verify-full` still checks its names.
#[derive(Debug)]
struct Verifier {
    provider: Arc<CryptoProvider>,
    webpki: Option<Checked>,
}

#[derive(Debug)]
struct Checked {
    webpki: Arc<WebPkiServerVerifier>,
    /// The `sslrootcert` file's certificates (none for the system's roots).
    trusted: Vec<CertificateDer<'static>>,
    check_name: bool,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(checked) = &self.webpki else { return Ok(ServerCertVerified::assertion()) };
        match checked.webpki.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(CertificateError::Other(e)))
                if is_ca_used_as_end_entity(&e) && checked.trusted.contains(end_entity) =>
            {
                if checked.check_name {
                    let parsed = ParsedCertificate::try_from(end_entity)?;
                    verify_server_name(&parsed, server_name)?;
                }
                Ok(ServerCertVerified::assertion())
            }
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !checked.check_name => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// WebPKI's refusal of a certificate authority's certificate as a server's (rustls passes
/// it on as an `Other` error).
fn is_ca_used_as_end_entity(e: &rustls::OtherError) -> bool {
    matches!(e.0.downcast_ref::<webpki::Error>(), Some(webpki::Error::CaUsedAsEndEntity))
}

/// The handshake for one connection, as tokio-postgres's `connect_raw` asks for it.
pub(crate) struct Connector {
    config: Option<Arc<ClientConfig>>,
    server_name: ServerName<'static>,
    watch: Watch,
}

impl<S: AsyncRead + AsyncWrite + Unpin> TlsConnect<S> for Connector {
    type Stream = TlsSocket<S>;
    type Error = io::Error;
    type Future = Handshake<S>;

    fn connect(self, stream: S) -> Handshake<S> {
        let connect = self
            .config
            .map(|config| tokio_rustls::TlsConnector::from(config).connect(self.server_name, stream));
        Handshake { connect, watch: self.watch }
    }
}

/// The TLS handshake in progress.
pub struct Handshake<S> {
    connect: Option<tokio_rustls::Connect<S>>,
    watch: Watch,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Future for Handshake<S> {
    type Output = io::Result<TlsSocket<S>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        match &mut this.connect {
            Some(connect) => Pin::new(connect)
                .poll(cx)
                .map_ok(|stream| TlsSocket(Watched::new(Box::new(stream), this.watch.take()))),
            None => Poll::Ready(Err(io::Error::other("TLS is disabled (sslmode=disable)"))),
        }
    }
}

impl Tls {
    /// What a failed handshake to `address` means, in words naming the setting to look
    /// at; `None` when `e` is no certificate or TLS protocol failure.
    pub(crate) fn explain(&self, e: &tokio_postgres::Error, address: &Address) -> Option<String> {
        let mut source = std::error::Error::source(e);
        let rustls_error = loop {
            let cause = source?;
            // An `io::Error` hides what it wraps from `source()`.
            let inner = cause
                .downcast_ref::<io::Error>()
                .and_then(|io| io.get_ref())
                .map(|e| e as &dyn std::error::Error);
            if let Some(found) = inner.unwrap_or(cause).downcast_ref::<rustls::Error>() {
                break found;
            }
            source = cause.source();
        };
        let roots = match &self.roots {
            Some(RootCert::File(path)) => format!("sslrootcert {}", path.display()),
            Some(RootCert::System) => "the system's trusted roots (sslrootcert=system)".to_owned(),
            None => "sslrootcert".to_owned(),
        };
        let host = match address {
            Address::Tcp { host, .. } => host.as_str(),
            Address::Unix(_) => "localhost",
        };
        Some(match rustls_error {
            rustls::Error::InvalidCertificate(problem) => match problem {
                CertificateError::UnknownIssuer | CertificateError::BadSignature => format!(
                    "TLS: the server's certificate is not trusted: it is not signed by a certificate authority of {roots}: \
                     set sslrootcert to the CA that signed the server's certificate (ssl_cert_file)"
                ),
                CertificateError::Other(e) if is_ca_used_as_end_entity(e) => format!(
                    "TLS: the server's certificate is not trusted: it is a self-signed or CA certificate \
                     (CA:TRUE, as `openssl req -x509` makes) that is not in {roots}: set sslrootcert \
                     to a copy of the server's certificate file (ssl_cert_file)"
                ),
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => format!(
                    "TLS: the server's certificate does not match the host name {host:?} (sslmode=verify-full; \
                     the names in its subjectAltName are read, not its CN): connect by a name the certificate \
                     holds, or use sslmode=verify-ca"
                ),
                CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                    "TLS: the server's certificate has expired: renew the server's ssl_cert_file".to_owned()
                }
                CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                    "TLS: the server's certificate is not valid yet: check this machine's clock and the \
                     server's ssl_cert_file"
                        .to_owned()
                }
                CertificateError::InvalidPurpose | CertificateError::InvalidPurposeContext { .. } => {
                    "TLS: the server's certificate is not meant for a server (its extendedKeyUsage lacks \
                     serverAuth): make it with extendedKeyUsage=serverAuth, or without that extension"
                        .to_owned()
                }
                other => format!("TLS: the server's certificate was refused: {other:?}"),
            },
            other => format!("TLS handshake failed: {other}"),
        })
    }
}

/// An established TLS stream, watched inside (see the `watch` module).
pub struct TlsSocket<S>(Watched<Box<tokio_rustls::client::TlsStream<S>>>);

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for TlsSocket<S> {
    fn channel_binding(&self) -> ChannelBinding {
        // SCRAM channel binding (tls-server-end-point) is not offered; authentication
        // still works with `channel_binding=prefer`, the default.
        ChannelBinding::none()
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for TlsSocket<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for TlsSocket<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}
