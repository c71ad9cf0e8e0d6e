//! Who may use the dashboard. It acts with the user's credentials, so every request must:
//! - name one of the addresses it listens on in `Host` (a foreign name that resolves to it, DNS
//!   rebinding, is refused);
//! - when it says where it comes from (`Origin`, which browsers send on every write and on
//!   cross-site reads), come from this dashboard's own page; a write must say so;
//! - for the API, carry the token printed at start-up: another local user, or a page that
//!   guessed the port, cannot read or act without it.
//!
//! The page and its assets hold no data and are served without the token; the page reads the
//! token from its own address (`/?token=...`) and sends it with every API call.

use anyhow::{Context, Result};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use ring::rand::{SecureRandom, SystemRandom};
use std::net::SocketAddr;
use subtle::ConstantTimeEq;

/// Header every write must carry: a page of another site cannot set it (nor `Authorization`)
/// without a CORS preflight, which this server never grants.
pub const ACTION_HEADER: &str = "x-numaplane-dashboard";
/// The query parameter that carries the token where no header can be set: the page's address,
/// and its event streams (a browser's `EventSource` sends no custom header).
pub const TOKEN_PARAM: &str = "token";
/// Random bytes in a token: 256 bits, never guessed.
const TOKEN_BYTES: usize = 32;

/// The per-run secret, as lowercase hex.
#[derive(Clone)]
pub struct Token(String);

impl Token {
    /// A fresh token from the operating system's random source.
    pub fn generate() -> Result<Token> {
        let mut bytes = [0u8; TOKEN_BYTES];
        SystemRandom::new()
            .fill(&mut bytes)
            .ok()
            .context("no random bytes from the operating system for the dashboard's token")?;
        Ok(Token(bytes.iter().map(|b| format!("{b:02x}")).collect()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `presented` is this token, in time that does not depend on where they differ
    /// (a caller timing answers learns nothing about the token).
    pub fn matches(&self, presented: &str) -> bool {
        self.0.as_bytes().ct_eq(presented.as_bytes()).into()
    }
}

#[cfg(test)]
impl From<&str> for Token {
    fn from(s: &str) -> Token {
        Token(s.to_string())
    }
}

/// Why a request is refused, and its HTTP status.
#[derive(Debug, PartialEq, Eq)]
pub struct Refusal {
    pub status: StatusCode,
    pub message: String,
}

fn refuse(status: StatusCode, message: String) -> Refusal {
    Refusal { status, message }
}

/// The rules for one listening address and token.
pub struct Guard {
    /// `Host` values this server answers to.
    hosts: Vec<String>,
    /// `Origin` values of its own page: `http://` and a host.
    origins: Vec<String>,
    token: Token,
}

impl Guard {
    pub fn new(bound: SocketAddr, token: Token) -> Guard {
        let hosts = hosts(bound);
        let origins = hosts.iter().map(|h| format!("http://{h}")).collect();
        Guard {
            hosts,
            origins,
            token,
        }
    }

    /// `None` when the request may go on.
    pub fn check(&self, method: &Method, uri: &Uri, headers: &HeaderMap) -> Option<Refusal> {
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
        if !host.is_some_and(|h| self.hosts.iter().any(|ok| ok.eq_ignore_ascii_case(h))) {
            return Some(refuse(
                StatusCode::FORBIDDEN,
                format!(
                    "host {:?} is not this dashboard's address ({})",
                    host.unwrap_or_default(),
                    self.hosts.join(", ")
                ),
            ));
        }
        let write = method != Method::GET && method != Method::HEAD;
        match headers
            .get(header::ORIGIN)
            .map(|o| o.to_str().unwrap_or("?"))
        {
            Some(origin)
                if !self
                    .origins
                    .iter()
                    .any(|ok| ok.eq_ignore_ascii_case(origin)) =>
            {
                return Some(refuse(
                    StatusCode::FORBIDDEN,
                    format!(
                        "origin {origin:?} is not this dashboard ({})",
                        self.origins.join(", ")
                    ),
                ));
            }
            // Browsers send Origin with every write: one without it is not from the page.
            None if write => {
                return Some(refuse(
                    StatusCode::FORBIDDEN,
                    format!(
                        "writes must come from the dashboard's page (Origin {})",
                        self.origins.join(" or ")
                    ),
                ));
            }
            _ => {}
        }
        if !uri.path().starts_with("/api/") {
            // The page, its script and style: no data in them.
            return None;
        }
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|a| a.to_str().ok())
            .and_then(|a| a.strip_prefix("Bearer "));
        // Writes take the token from the header only: a link or a form cannot set one.
        let presented = bearer.or(if write { None } else { query_token(uri) });
        match presented {
            None => Some(refuse(
                StatusCode::UNAUTHORIZED,
                format!(
                    "no token: open the address the dashboard printed (with ?{TOKEN_PARAM}=...), \
                     or send Authorization: Bearer <token>{}",
                    if write {
                        " (writes: the header only)"
                    } else {
                        ""
                    }
                ),
            )),
            Some(t) if !self.token.matches(t) => Some(refuse(
                StatusCode::UNAUTHORIZED,
                "wrong token: open the address this run of the dashboard printed".to_string(),
            )),
            Some(_) if write && !headers.contains_key(ACTION_HEADER) => Some(refuse(
                StatusCode::FORBIDDEN,
                format!("writes need the {ACTION_HEADER} header"),
            )),
            Some(_) => None,
        }
    }
}

/// The `token` query parameter, if any (a token is hex: nothing to decode).
fn query_token(uri: &Uri) -> Option<&str> {
    uri.query()?
        .split('&')
        .find_map(|kv| kv.strip_prefix(TOKEN_PARAM)?.strip_prefix('='))
}

/// The `Host` values a browser sends for this server: its address, and `localhost` when that is a
/// loopback address (browsers resolve `localhost` only to loopback, so no other site can
/// borrow the name). Port 80 may be left out by the browser.
fn hosts(bound: SocketAddr) -> Vec<String> {
    let port = bound.port();
    let mut names = vec![match bound {
        SocketAddr::V4(a) => a.ip().to_string(),
        SocketAddr::V6(a) => format!("[{}]", a.ip()),
    }];
    if bound.ip().is_loopback() {
        names.push("localhost".to_string());
    }
    let mut hosts: Vec<String> = names.iter().map(|n| format!("{n}:{port}")).collect();
    if port == 80 {
        hosts.extend(names);
    }
    hosts
}

/// Refuses a listening address that others could reach unless `allow_remote` says so, and one
/// that is every interface: the names it would be reached by are unknown, so no `Host` could be
/// checked.
pub fn check_address(addr: std::net::IpAddr, allow_remote: bool) -> Result<(), String> {
    if addr.is_unspecified() {
        return Err(format!(
            "--address {addr} (every interface) is refused: requests must name the address the \
             dashboard listens on; give the one address others should use, with --allow-remote"
        ));
    }
    if !addr.is_loopback() && !allow_remote {
        return Err(format!(
            "--address {addr} is not a loopback address: whoever reaches it and learns the token \
             (sent unencrypted over HTTP) acts with your credentials. Add --allow-remote to listen \
             there anyway"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    const TOKEN: &str = "0123abcd";

    fn guard(bound: &str) -> Guard {
        Guard::new(bound.parse().expect("addr"), Token::from(TOKEN))
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).expect("header value"));
        }
        h
    }

    fn status(g: &Guard, method: Method, uri: &str, pairs: &[(&'static str, &str)]) -> u16 {
        let uri: Uri = uri.parse().expect("uri");
        g.check(&method, &uri, &headers(pairs))
            .map(|r| r.status.as_u16())
            .unwrap_or(200)
    }

    const BEARER: (&str, &str) = ("authorization", "Bearer 0123abcd");

    #[test]
    fn the_api_needs_the_token_the_page_does_not() {
        let g = guard("127.0.0.1:3100");
        let host = ("host", "127.0.0.1:3100");
        assert_eq!(status(&g, Method::GET, "/", &[host]), 200);
        assert_eq!(status(&g, Method::GET, "/app.js", &[host]), 200);
        assert_eq!(status(&g, Method::GET, "/api/info", &[host]), 401);
        assert_eq!(
            status(
                &g,
                Method::GET,
                "/api/info",
                &[host, ("authorization", "Bearer 0123abce")]
            ),
            401
        );
        assert_eq!(
            status(
                &g,
                Method::GET,
                "/api/info",
                &[host, ("authorization", "Bearer 0123abc")]
            ),
            401,
            "a prefix of the token is not the token"
        );
        assert_eq!(status(&g, Method::GET, "/api/info", &[host, BEARER]), 200);
        assert_eq!(
            status(
                &g,
                Method::GET,
                "/api/rollouts/stream?token=0123abcd",
                &[host]
            ),
            200
        );
        assert_eq!(
            status(
                &g,
                Method::GET,
                "/api/rollouts/stream?x=1&token=0123abcd",
                &[host]
            ),
            200
        );
        assert_eq!(
            status(&g, Method::GET, "/api/rollouts/stream?token=nope", &[host]),
            401
        );
    }

    #[test]
    fn writes_need_the_token_header_the_action_header_and_the_own_origin() {
        let g = guard("127.0.0.1:3100");
        let host = ("host", "127.0.0.1:3100");
        let origin = ("origin", "http://127.0.0.1:3100");
        let action = (ACTION_HEADER, "1");
        let path = "/api/rollouts/pr/ns/p/actions/pause";
        assert_eq!(
            status(&g, Method::POST, path, &[host, origin, action, BEARER]),
            200
        );
        // localhost and 127.0.0.1 are the same loopback server.
        assert_eq!(
            status(
                &g,
                Method::POST,
                path,
                &[("host", "localhost:3100"), origin, action, BEARER]
            ),
            200
        );
        assert_eq!(status(&g, Method::POST, path, &[host, origin, action]), 401);
        let in_query = format!("{path}?token={TOKEN}");
        assert_eq!(
            status(&g, Method::POST, &in_query, &[host, origin, action]),
            401,
            "a write's token comes in the header only"
        );
        assert_eq!(status(&g, Method::POST, path, &[host, origin, BEARER]), 403);
        assert_eq!(status(&g, Method::POST, path, &[host, action, BEARER]), 403);
        let foreign = ("origin", "http://evil.example");
        assert_eq!(
            status(&g, Method::POST, path, &[host, foreign, action, BEARER]),
            403
        );
        assert_eq!(
            status(
                &g,
                Method::POST,
                path,
                &[host, ("origin", "null"), action, BEARER]
            ),
            403
        );
    }

    #[test]
    fn origin_and_host_are_this_servers_addresses_never_each_other() {
        let g = guard("127.0.0.1:3100");
        // DNS rebinding: the attacker's name resolves to 127.0.0.1; Host and Origin agree with
        // each other, and neither is this server.
        let rebound = [
            ("host", "evil.example:3100"),
            ("origin", "http://evil.example:3100"),
            BEARER,
        ];
        assert_eq!(status(&g, Method::GET, "/", &rebound), 403);
        assert_eq!(status(&g, Method::GET, "/api/info", &rebound), 403);
        assert_eq!(
            status(&g, Method::GET, "/api/info", &[BEARER]),
            403,
            "no Host"
        );
        // A read from another site's page carries its Origin: refused even with the token.
        let cross = [
            ("host", "127.0.0.1:3100"),
            ("origin", "http://evil.example"),
            BEARER,
        ];
        assert_eq!(status(&g, Method::GET, "/api/info", &cross), 403);
        // Another port of the same machine is another site.
        let port = [
            ("host", "127.0.0.1:3100"),
            ("origin", "http://127.0.0.1:8080"),
            BEARER,
        ];
        assert_eq!(status(&g, Method::GET, "/api/info", &port), 403);
    }

    #[test]
    fn the_addresses_are_those_listened_on() {
        assert_eq!(
            hosts("127.0.0.1:3100".parse().expect("addr")),
            ["127.0.0.1:3100", "localhost:3100"]
        );
        assert_eq!(
            hosts("[::1]:3100".parse().expect("addr")),
            ["[::1]:3100", "localhost:3100"]
        );
        assert_eq!(
            hosts("10.0.0.5:3100".parse().expect("addr")),
            ["10.0.0.5:3100"],
            "a routable address has no other name"
        );
        assert_eq!(
            hosts("127.0.0.1:80".parse().expect("addr")),
            ["127.0.0.1:80", "localhost:80", "127.0.0.1", "localhost"]
        );
        let g = guard("10.0.0.5:3100");
        let ok = [
            ("host", "10.0.0.5:3100"),
            ("origin", "http://10.0.0.5:3100"),
            BEARER,
        ];
        assert_eq!(status(&g, Method::GET, "/api/info", &ok), 200);
        assert_eq!(
            status(
                &g,
                Method::GET,
                "/api/info",
                &[("host", "localhost:3100"), BEARER]
            ),
            403
        );
    }

    #[test]
    fn only_loopback_unless_allowed_and_never_every_interface() {
        let ip = |s: &str| s.parse::<std::net::IpAddr>().expect("ip");
        assert!(check_address(ip("127.0.0.1"), false).is_ok());
        assert!(check_address(ip("::1"), false).is_ok());
        let refused = check_address(ip("10.0.0.5"), false).expect_err("refused");
        assert!(refused.contains("--allow-remote"), "{refused}");
        assert!(check_address(ip("10.0.0.5"), true).is_ok());
        for every in ["0.0.0.0", "::"] {
            assert!(check_address(ip(every), true).is_err(), "{every}");
        }
    }

    #[test]
    fn tokens_are_long_random_and_compared_whole() {
        let a = Token::generate().expect("token");
        let b = Token::generate().expect("token");
        assert_eq!(a.as_str().len(), 2 * TOKEN_BYTES);
        assert!(a.as_str().bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a.as_str(), b.as_str());
        assert!(a.matches(a.as_str()));
        assert!(!a.matches(b.as_str()));
        assert!(!a.matches(""));
        assert!(!a.matches(&a.as_str()[..10]));
    }
}
