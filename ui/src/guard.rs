//! Who may use the dashboard, checked before any route: the token, the host name, and
//! the rules that keep actions same-site (see the crate's documentation).

use crate::{Error, State};
use axum::extract::Request;
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The header every action must carry; the dashboard's script sends it.
pub const ACTION_HEADER: &str = "x-formica-ui";
const COOKIE: &str = "formica_ui_token";

/// Let `request` through, or answer it with why not.
pub async fn guard(
    axum::extract::State(state): axum::extract::State<State>,
    request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    match &state.options.token {
        Some(token) => {
            if let Some(given) = query_token(request.uri().query()) {
                return if same(&given, token) && request.method() == Method::GET {
                    // Keep the token in a cookie and out of the address bar and history.
                    let cookie = format!("{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict");
                    let to = request.uri().path().to_owned();
                    (StatusCode::SEE_OTHER, [(header::SET_COOKIE, cookie), (header::LOCATION, to)])
                        .into_response()
                } else {
                    Error::Unauthorized.into_response()
                };
            }
            if !presented(headers).is_some_and(|given| same(&given, token)) {
                return Error::Unauthorized.into_response();
            }
        }
        // Without a token, a name other than localhost or an address means a page of
        // another site reached us through DNS rebinding.
        None if !local_host(headers) => {
            return Error::Forbidden("the dashboard answers only to localhost or an IP address".into())
                .into_response()
        }
        None => {}
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        if state.options.read_only {
            return Error::Forbidden("the dashboard is read-only".into()).into_response();
        }
        if let Err(why) = same_site(headers) {
            return Error::Forbidden(format!("cross-site request refused: {why}")).into_response();
        }
    }
    next.run(request).await
}

/// Compare without telling how much of the token matched through the time taken.
fn same(given: &str, token: &str) -> bool {
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
