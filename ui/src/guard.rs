//! Who may use the dashboard, checked before any route: the token and the role it gives,
//! the host name, and the rules that keep actions same-site (see the crate's
//! documentation).

use crate::{Error, State};
use axum::extract::Request;
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The header every action must carry; the dashboard's script sends it.
pub const ACTION_HEADER: &str = "x-formica-ui";
const COOKIE: &str = "formica_ui_token";

/// What a token lets its holder do; each role may do what the one before it may.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Look at every page and the API's reads; no action.
    Viewer,
    /// Act on jobs: add one, run now, reschedule, retry (redrive), cancel, fail, delete, in
    /// bulk too; run a cron item or a schedule now; pause and resume; act on workflows.
    Operator,
    /// Everything: also what changes how the queue runs or risks running a job twice:
    /// caps and rate limits, agings, runtime schedules, dead letters, unlocking workers.
    Admin,
}

impl Role {
    /// Its name, as `--viewer-token` and the page's badge say it.
    pub fn name(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    /// The role a request of `method` on `path` needs. Every action not listed as an
    /// admin's is an operator's, so a new action is never open to a viewer.
    pub(crate) fn needed(method: &Method, path: &str) -> Role {
        if method == Method::GET || method == Method::HEAD {
            return Role::Viewer;
        }
        let admin = matches!(
            path,
            "/api/workers/unlock"
                | "/api/flow/cap"
                | "/api/flow/uncap"
                | "/api/flow/limit"
                | "/api/flow/unlimit"
                | "/api/flow/age"
                | "/api/flow/unage"
                | "/api/flow/fair"
                | "/api/flow/unfair"
                | "/api/schedules"
                | "/api/dead_letters"
                | "/api/dead_letters/remove"
        ) || (path.starts_with("/api/schedules/") && path.ends_with("/remove"));
        if admin {
            Role::Admin
        } else {
            Role::Operator
        }
    }
}

tokio::task_local! {
    /// The role of the request being answered (set by [`guard`]), so a page shows only the
    /// actions its reader may take.
    static ROLE: Role;
}

/// Whether the request being answered may post to `path` (false outside a request).
pub(crate) fn may(path: &str) -> bool {
    ROLE.try_with(|role| *role >= Role::needed(&Method::POST, path)).unwrap_or(false)
}

/// Whether the request being answered may take an operator's actions.
pub(crate) fn may_act() -> bool {
    role().is_some_and(|role| role >= Role::Operator)
}

/// The role of the request being answered, if any.
pub(crate) fn role() -> Option<Role> {
    ROLE.try_with(|role| *role).ok()
}

/// Let `request` through, or answer it with why not.
pub async fn guard(
    axum::extract::State(state): axum::extract::State<State>,
    request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    let options = &state.options;
    let role = if options.any_token() {
        if let Some(given) = query_token(request.uri().query()) {
            return if options.role_of(&given).is_some() && request.method() == Method::GET {
                // Keep the token in a cookie and out of the address bar and history.
                let cookie = format!("{COOKIE}={given}; Path=/; HttpOnly; SameSite=Strict");
                let to = request.uri().path().to_owned();
                (StatusCode::SEE_OTHER, [(header::SET_COOKIE, cookie), (header::LOCATION, to)])
                    .into_response()
            } else {
                Error::Unauthorized.into_response()
            };
        }
        match presented(headers).and_then(|given| options.role_of(&given)) {
            Some(role) => role,
            None => return Error::Unauthorized.into_response(),
        }
    } else if !local_host(headers) {
        // Without a token, a name other than localhost or an address means a page of
        // another site reached us through DNS rebinding.
        return Error::Forbidden("the dashboard answers only to localhost or an IP address".into())
            .into_response();
    } else {
        Role::Admin
    };
    let role = if options.read_only { Role::Viewer } else { role };
    let needed = Role::needed(request.method(), request.uri().path());
    if role < needed {
        let why = if options.read_only {
            "the dashboard is read-only".to_owned()
        } else {
            format!("this token's role is {}: this action needs {}", role.name(), needed.name())
        };
        return Error::Forbidden(why).into_response();
    }
    if needed > Role::Viewer {
        if let Err(why) = same_site(headers) {
            return Error::Forbidden(format!("cross-site request refused: {why}")).into_response();
        }
    }
    ROLE.scope(role, next.run(request)).await
}

/// Compare without telling how much of the token matched through the time taken.
pub(crate) fn same(given: &str, token: &str) -> bool {
    given.len() == token.len() && given.bytes().zip(token.bytes()).fold(0, |acc, (a, b)| acc | (a ^ b)) == 0
}

fn query_token(query: Option<&str>) -> Option<String> {
    query?.split('&').find_map(|pair| pair.strip_prefix("token=")).map(percent_decode)
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = || {
            std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok().and_then(|h| u8::from_str_radix(h, 16).ok())
        };
        match (bytes[i], hex()) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The token a request carries, in its `Authorization` header or its cookie.
fn presented(headers: &HeaderMap) -> Option<String> {
    let text = |name| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(bearer) = text(header::AUTHORIZATION).and_then(|v| v.strip_prefix("Bearer ")) {
        return Some(bearer.trim().to_owned());
    }
    headers.get_all(header::COOKIE).iter().filter_map(|v| v.to_str().ok()).find_map(|cookies| {
        cookies.split(';').find_map(|c| c.trim().strip_prefix(COOKIE)?.strip_prefix('=').map(str::to_owned))
    })
}

/// The host name of the `Host` header, without its port.
fn host_name(headers: &HeaderMap) -> Option<&str> {
    let host = headers.get(header::HOST)?.to_str().ok()?;
    Some(match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    })
}

fn local_host(headers: &HeaderMap) -> bool {
    host_name(headers).is_some_and(|name| {
        name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::IpAddr>().is_ok()
    })
}

/// Why an action's request may come from another site, if it may.
fn same_site(headers: &HeaderMap) -> Result<(), String> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if text(ACTION_HEADER).is_none() {
        return Err(format!("actions need the {ACTION_HEADER} header that the dashboard's pages send"));
    }
    if let Some(site) = text("sec-fetch-site") {
        if site != "same-origin" && site != "none" {
            return Err(format!("the browser says it comes from a {site} page"));
        }
    }
    if let (Some(origin), Some(host)) = (text("origin"), text("host")) {
        let bare = origin.split_once("://").map_or(origin, |(_, rest)| rest);
        if bare != host {
            return Err(format!("it comes from {origin}, not this dashboard"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn hosts_are_local_names_or_addresses() {
        for host in ["localhost:8080", "127.0.0.1:1", "[::1]:80", "10.0.0.2", "LOCALHOST"] {
            assert!(local_host(&headers(&[("host", host)])), "{host}");
        }
        for host in ["evil.example:8080", "localhost.evil.example"] {
            assert!(!local_host(&headers(&[("host", host)])), "{host}");
        }
        assert!(!local_host(&HeaderMap::new()));
    }

    #[test]
    fn tokens_come_from_the_bearer_header_the_cookie_or_the_query() {
        assert_eq!(presented(&headers(&[("authorization", "Bearer s3cret")])).as_deref(), Some("s3cret"));
        let cookie = headers(&[("cookie", "a=b; formica_ui_token=s3cret; c=d")]);
        assert_eq!(presented(&cookie).as_deref(), Some("s3cret"));
        assert_eq!(presented(&headers(&[("cookie", "formica_ui_tokenx=1")])), None);
        assert_eq!(query_token(Some("x=1&token=a%2Bb+c")).as_deref(), Some("a+b c"));
        assert!(same("abc", "abc") && !same("abc", "abd") && !same("ab", "abc"));
    }

    #[test]
    fn actions_must_be_same_site() {
        assert!(same_site(&headers(&[(ACTION_HEADER, "1"), ("host", "127.0.0.1:9")])).is_ok());
        let ok = [(ACTION_HEADER, "1"), ("host", "127.0.0.1:9"), ("origin", "http://127.0.0.1:9")];
        assert!(same_site(&headers(&ok)).is_ok());
        assert!(same_site(&headers(&[("host", "127.0.0.1:9")])).is_err());
        let other = [(ACTION_HEADER, "1"), ("host", "127.0.0.1:9"), ("origin", "http://evil.example")];
        assert!(same_site(&headers(&other)).is_err());
        assert!(same_site(&headers(&[(ACTION_HEADER, "1"), ("sec-fetch-site", "cross-site")])).is_err());
    }
}
