//! Connection settings as libpq understands them: a `postgres://` URL or `key=value`
//! words, completed from the `PG*` environment variables, plus the password file.
//!
//! tokio-postgres's own parser knows neither the environment, nor `verify-ca`/
//! `verify-full`, nor `sslrootcert`/`sslcert`/`sslkey`: the string is read here into
//! words, the TLS words are taken out for [`Tls`], and the rest is handed to
//! tokio-postgres (so its checks of the values apply). A value given in the string wins
//! over the environment, as in libpq. `?ssl=true` (node-postgres, JDBC) means
//! `sslmode=require`.
//!
//! Defaults when neither gives one: host `localhost`, user the operating system's user.
//! The password, when none is given, comes from the password file (`passfile`,
//! `PGPASSFILE`, else `~/.pgpass`) for the address actually connected to; a file others can
//! read is ignored with a warning, as libpq does.

use crate::error::Error;
use crate::runtime::Address;
use crate::tls::{RootCert, SslMode, Tls};
use std::path::PathBuf;
use tokio_postgres::Config;

/// Settings words that come from an environment variable when the string lacks them.
const ENVIRONMENT: &[(&str, &str)] = &[
    ("host", "PGHOST"),
    ("hostaddr", "PGHOSTADDR"),
    ("port", "PGPORT"),
    ("user", "PGUSER"),
    ("password", "PGPASSWORD"),
    ("dbname", "PGDATABASE"),
    ("application_name", "PGAPPNAME"),
    ("connect_timeout", "PGCONNECT_TIMEOUT"),
    ("options", "PGOPTIONS"),
    ("target_session_attrs", "PGTARGETSESSIONATTRS"),
    ("channel_binding", "PGCHANNELBINDING"),
    ("sslmode", "PGSSLMODE"),
    ("sslrootcert", "PGSSLROOTCERT"),
    ("sslcert", "PGSSLCERT"),
    ("sslkey", "PGSSLKEY"),
    ("passfile", "PGPASSFILE"),
];

/// Whether any of the `PG*` variables that name a server, a database or a user is set (then
/// `""` is a meaningful connection string). A `PGSSLMODE` alone does not say where to go.
pub fn pg_env_is_set() -> bool {
    ["PGHOST", "PGHOSTADDR", "PGPORT", "PGUSER", "PGPASSWORD", "PGDATABASE"]
        .iter()
        .any(|var| std::env::var_os(var).is_some_and(|v| !v.is_empty()))
}

/// Where and how to connect: tokio-postgres's [`Config`], the TLS settings and the password
/// file. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ConnectionSettings {
    config: Config,
    tls: Tls,
    passfile: Option<PathBuf>,
}

impl ConnectionSettings {
    /// Read `text` (a `postgres://` URL or libpq `key=value` words), completed from the
    /// process's `PG*` environment variables.
    pub fn parse(text: &str) -> Result<Self, Error> {
        Self::parse_with_env(text, |name| std::env::var(name).ok())
    }

    /// [`ConnectionSettings::parse`] with `env` in place of the process environment.
    pub fn parse_with_env(text: &str, env: impl Fn(&str) -> Option<String>) -> Result<Self, Error> {
        let mut words = words(text).map_err(Error::Settings)?;
        if words.iter().any(|(k, v)| k == "host" && v.split(',').any(str::is_empty)) {
            return Err(Error::Settings(
                "an empty host: name a host, an IP address or a socket directory".into(),
            ));
        }
        for (key, var) in ENVIRONMENT {
            if !words.iter().any(|(k, _)| k == key) {
                if let Some(value) = env(var).filter(|v| !v.is_empty()) {
                    words.push((key.to_string(), value));
                }
            }
        }
        if !words.iter().any(|(k, _)| k == "user") {
            if let Some(user) = env("USER").or_else(|| env("LOGNAME")).or_else(|| env("USERNAME")) {
                words.push(("user".into(), user));
            }
        }
        if !words.iter().any(|(k, _)| k == "host" || k == "hostaddr") {
            words.push(("host".into(), "localhost".into()));
        }
        let take = |key: &str, words: &mut Vec<(String, String)>| {
            let value = words.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.clone());
            words.retain(|(k, _)| k != key);
            value
        };
        let mode = match take("sslmode", &mut words) {
            Some(word) => SslMode::parse(&word).ok_or_else(|| {
                Error::Settings(format!(
                    "sslmode={word:?} is not one of disable, allow, prefer, require, verify-ca, verify-full"
                ))
            })?,
            None => SslMode::Prefer,
        };
        let roots = take("sslrootcert", &mut words).map(|value| {
            if value == "system" {
                RootCert::System
            } else {
                RootCert::File(value.into())
            }
        });
        let cert = take("sslcert", &mut words);
        let key = take("sslkey", &mut words);
        let client = match (cert, key) {
            (Some(cert), Some(key)) => Some((cert.into(), key.into())),
            (None, None) => None,
            _ => return Err(Error::Settings("sslcert and sslkey go together: give both files".into())),
        };
        let passfile = take("passfile", &mut words).map(PathBuf::from);
        let tls = Tls::new(mode, roots, client).map_err(Error::Settings)?;
        let mut config: Config = quote_words(&words)
            .parse()
            .map_err(|e: tokio_postgres::Error| Error::Settings(crate::error::describe(&e)))?;
        config.ssl_mode(match mode {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            _ => tokio_postgres::config::SslMode::Require,
        });
        Ok(ConnectionSettings { config, tls, passfile })
    }

    /// tokio-postgres's part of the settings.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// tokio-postgres's part, to change (a timeout, the application name).
    pub fn config_mut(&mut self) -> &mut Config {
        &mut self.config
    }

    /// The TLS settings.
    pub fn tls(&self) -> &Tls {
        &self.tls
    }

    /// Set `application_name` unless the settings give one.
    pub fn default_application_name(&mut self, name: &str) {
        if self.config.get_application_name().is_none() {
            self.config.application_name(name);
        }
    }

    /// The settings for connecting to `address`: the password from the password file when
    /// none is given.
    pub(crate) fn for_address(&self, address: &Address) -> Config {
        let mut config = self.config.clone();
        if config.get_password().is_none() {
            if let Some(password) = self.passfile_password(address) {
                config.password(password);
            }
        }
        config
    }

    fn passfile_password(&self, address: &Address) -> Option<String> {
        let path = self.passfile.clone().or_else(|| {
            let home = std::env::var_os("HOME")?;
            Some(PathBuf::from(home).join(".pgpass"))
        })?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).ok()?.permissions().mode();
            if mode & 0o077 != 0 {
                tracing::warn!(
                    file = %path.display(),
                    "password file has group or world access; permissions should be u=rw (0600) or less: ignored"
                );
                return None;
            }
        }
        let text = std::fs::read_to_string(&path).ok()?;
        let (host, port) = match address {
            Address::Tcp { host, port } => (host.clone(), *port),
            Address::Unix(path) => {
                let port =
                    path.extension().and_then(|e| e.to_str()).and_then(|p| p.parse().ok()).unwrap_or(5432);
                ("localhost".to_owned(), port)
            }
        };
        let user = self.config.get_user().unwrap_or_default();
        let dbname = self.config.get_dbname().unwrap_or(user);
        passfile_lookup(&text, &host, port, dbname, user)
    }
}

impl From<Config> for ConnectionSettings {
    /// Settings from an already built [`Config`]: its `sslmode` (`prefer` or `require`, no
    /// certificate check), no environment.
    fn from(config: Config) -> Self {
        let mode = match config.get_ssl_mode() {
            tokio_postgres::config::SslMode::Disable => SslMode::Disable,
            tokio_postgres::config::SslMode::Require => SslMode::Require,
            _ => SslMode::Prefer,
        };
        let tls = Tls::new(mode, None, None).unwrap_or_else(|_| Tls::disabled());
        ConnectionSettings { config, tls, passfile: None }
    }
}

impl std::str::FromStr for ConnectionSettings {
    type Err = Error;
    fn from_str(text: &str) -> Result<Self, Error> {
        ConnectionSettings::parse(text)
    }
}

/// The password of the first line of a `.pgpass` text matching the connection (`*` matches
/// anything; `\` escapes `:` and `\`).
fn passfile_lookup(text: &str, host: &str, port: u16, dbname: &str, user: &str) -> Option<String> {
    let port = port.to_string();
    text.lines().filter(|line| !line.trim_start().starts_with('#')).find_map(|line| {
        let fields = split_passfile_line(line);
        let [h, p, d, u, password] = <[String; 5]>::try_from(fields).ok()?;
        let matches = |field: &str, value: &str| field == "*" || field == value;
        (matches(&h, host) && matches(&p, &port) && matches(&d, dbname) && matches(&u, user))
            .then_some(password)
    })
}

fn split_passfile_line(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => fields.last_mut().into_iter().for_each(|f| f.extend(chars.next())),
            ':' if fields.len() < 5 => fields.push(String::new()),
            c => fields.last_mut().into_iter().for_each(|f| f.push(c)),
        }
    }
    fields
}

/// The settings words of `text`, in order.
fn words(text: &str) -> Result<Vec<(String, String)>, String> {
    let text = text.trim();
    match text.strip_prefix("postgres://").or_else(|| text.strip_prefix("postgresql://")) {
        Some(rest) => url_words(rest),
        None => key_value_words(text),
    }
}

/// `[user[:password]@][host[:port][,...]][/dbname][?key=value&...]`, percent-decoded.
fn url_words(rest: &str) -> Result<Vec<(String, String)>, String> {
    let mut words = Vec::new();
    let (main, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (credentials, location) = match main.rsplit_once('@') {
        Some((credentials, location)) => (Some(credentials), location),
        None => (None, main),
    };
    if let Some(credentials) = credentials {
        let (user, password) = match credentials.split_once(':') {
            Some((user, password)) => (user, Some(password)),
            None => (credentials, None),
        };
        if !user.is_empty() {
            words.push(("user".into(), decode(user)?));
        }
        if let Some(password) = password {
            words.push(("password".into(), decode(password)?));
        }
    }
    let (hosts, dbname) = location.split_once('/').unwrap_or((location, ""));
    if !hosts.is_empty() {
        let mut names = Vec::new();
        let mut ports = Vec::new();
        for spec in hosts.split(',') {
            let (name, port) = match spec.strip_prefix('[') {
                Some(v6) => {
                    let (name, after) =
                        v6.split_once(']').ok_or_else(|| format!("unclosed [ in host {spec:?}"))?;
                    (name, after.strip_prefix(':'))
                }
                None => match spec.rsplit_once(':') {
                    Some((name, port)) => (name, Some(port)),
                    None => (spec, None),
                },
            };
            names.push(decode(name)?);
            ports.push(port.unwrap_or("").to_owned());
        }
        if names.iter().any(|n| !n.is_empty()) {
            words.push(("host".into(), names.join(",")));
        }
        if ports.iter().any(|p| !p.is_empty()) {
            words.push(("port".into(), ports.join(",")));
        }
    }
    if !dbname.is_empty() {
        words.push(("dbname".into(), decode(dbname)?));
    }
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) =
            pair.split_once('=').ok_or_else(|| format!("URL parameter {pair:?} has no value"))?;
        let (key, value) = (decode(key)?, decode(value)?);
        match key.as_str() {
            "ssl" => match value.as_str() {
                "true" | "1" => words.push(("sslmode".into(), "require".into())),
                "false" | "0" => words.push(("sslmode".into(), "disable".into())),
                _ => return Err(format!("ssl={value:?}: expected true or false")),
            },
            _ => words.push((key, value)),
        }
    }
    Ok(words)
}

fn decode(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3).ok_or_else(|| format!("bad percent escape in {text:?}"))?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| format!("bad percent escape in {text:?}"))?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("{text:?} does not decode to UTF-8"))
}

/// `key=value key='quoted \' value'`.
fn key_value_words(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut words = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Ok(words);
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return Err(format!("{key:?} has no value: expected key=value"));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    Some('\'') => break,
                    Some('\\') => value.extend(chars.next()),
                    Some(c) => value.push(c),
                    None => return Err(format!("the value of {key:?} has no closing quote")),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                match c {
                    '\\' => value.extend(chars.next()),
                    c => value.push(c),
                }
            }
        }
        words.push((key, value));
    }
}

fn quote_words(words: &[(String, String)]) -> String {
    words
        .iter()
        .map(|(key, value)| format!("{key}='{}'", value.replace('\\', "\\\\").replace('\'', "\\'")))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(text: &str, env: &[(&str, &str)]) -> Result<ConnectionSettings, Error> {
        let env: HashMap<String, String> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        ConnectionSettings::parse_with_env(text, |name| env.get(name).cloned())
    }

    #[test]
    fn urls_give_every_part() {
        let s = parse(
            "postgres://al%40x:p%3Ass@db.example:6432/my%20db?application_name=app&sslmode=disable",
            &[],
        )
        .unwrap();
        let c = s.config();
        assert_eq!(c.get_user(), Some("al@x"));
        assert_eq!(c.get_password(), Some(&b"p:ss"[..]));
        assert_eq!(c.get_hosts(), &[tokio_postgres::config::Host::Tcp("db.example".into())]);
        assert_eq!(c.get_ports(), &[6432]);
        assert_eq!(c.get_dbname(), Some("my db"));
        assert_eq!(c.get_application_name(), Some("app"));
        assert_eq!(s.tls().mode(), SslMode::Disable);
    }

    #[test]
    fn ssl_true_means_require() {
        assert_eq!(parse("postgres://u@h/d?ssl=true", &[]).unwrap().tls().mode(), SslMode::Require);
    }

    #[test]
    fn the_string_wins_over_the_environment() {
        let env = [
            ("PGHOST", "/run/sockets"),
            ("PGPORT", "7000"),
            ("PGUSER", "envuser"),
            ("PGAPPNAME", "fromenv"),
            ("PGCONNECT_TIMEOUT", "7"),
            ("PGPASSWORD", "envpass"),
            ("PGDATABASE", "envdb"),
            ("PGSSLMODE", "disable"),
        ];
        let s = parse("user=me dbname='a \\'b'", &env).unwrap();
        let c = s.config();
        assert_eq!(c.get_user(), Some("me"));
        assert_eq!(c.get_dbname(), Some("a 'b"));
        assert_eq!(c.get_password(), Some(&b"envpass"[..]));
        assert_eq!(c.get_connect_timeout(), Some(&std::time::Duration::from_secs(7)));
        assert_eq!(s.tls().mode(), SslMode::Disable);
        assert_eq!(parse("", &env).unwrap().config().get_dbname(), Some("envdb"));
        assert_eq!(c.get_ports(), &[7000]);
        assert_eq!(c.get_application_name(), Some("fromenv"));
        #[cfg(unix)]
        assert_eq!(c.get_hosts(), &[tokio_postgres::config::Host::Unix("/run/sockets".into())]);
    }

    #[test]
    fn bad_settings_are_named() {
        let e = parse("postgres://u@h/d?sslmode=sometimes", &[]).unwrap_err().to_string();
        assert!(e.contains("sslmode=\"sometimes\""), "{e}");
        let e = parse("host=h sslmode=verify-full", &[]).unwrap_err().to_string();
        assert!(e.contains("sslrootcert"), "{e}");
        let e = parse("host=h frobnicate=1", &[]).unwrap_err().to_string();
        assert!(e.contains("frobnicate"), "{e}");
        let e =
            parse("host=h sslrootcert=/nonexistent/ca.pem sslmode=verify-ca", &[]).unwrap_err().to_string();
        assert!(e.contains("/nonexistent/ca.pem"), "{e}");
    }

    #[test]
    fn the_password_file_matches_fields_and_wildcards() {
        let text = "# comment\nother:*:*:*:no\nlocalhost:5433:*:bob:sec\\:ret\n*:*:*:*:fallback\n";
        assert_eq!(passfile_lookup(text, "localhost", 5433, "db", "bob").as_deref(), Some("sec:ret"));
        assert_eq!(passfile_lookup(text, "localhost", 5432, "db", "bob").as_deref(), Some("fallback"));
        assert_eq!(passfile_lookup("h:1:d:u:p", "h", 2, "d", "u"), None);
    }
}
