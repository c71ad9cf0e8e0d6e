//! A fault-injecting proxy between a client (the operator) and the API server, for the chaos
//! suite: plain HTTP on loopback in front, the API server (TLS, the given identity) behind.
//! While enabled, a seeded fraction of requests is answered by the proxy instead, the way an
//! API server under trouble answers:
//!
//! - `409 Conflict` to updates, patches other than server-side apply, and deletes (a stale
//!   resourceVersion or precondition);
//! - `500 InternalError` and `429 TooManyRequests` (with `Retry-After`) to anything;
//! - a timeout: the request hangs for a few seconds, then `504 Timeout` (never forwarded);
//! - a lost answer: a write is forwarded and applied, then the connection is cut before the
//!   answer is read (the client cannot tell whether it happened);
//! - dropped watches: each watch is cut after a random few seconds to a minute.
//!
//! A run can also owe a kind of fault ([`FaultProxy::owe`]): the next request it applies to gets
//! it, so a short run can still be made to meet every kind.
//!
//! The sequence of faults depends on the seed and on the order requests arrive, which the client
//! decides; a run prints the seed, the counts and the history the checks need, not a replay of
//! every request.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::response::Response;
use futures::StreamExt;
use http::{HeaderValue, Method, StatusCode, header};
use http_body_util::BodyExt;
use tokio::task::JoinHandle;

/// How often each fault happens, as fractions of the requests it can apply to.
#[derive(Clone, Copy, Debug)]
pub struct Rates {
    /// Answered with an error status without being forwarded.
    pub reject: f64,
    /// Held, then answered `504` without being forwarded.
    pub timeout: f64,
    /// Writes forwarded, then the answer cut off.
    pub lost_answer: f64,
    /// Watches are cut after a uniform time in this range.
    pub watch_life: (Duration, Duration),
}

impl Default for Rates {
    fn default() -> Self {
        Rates {
            reject: 0.04,
            timeout: 0.01,
            lost_answer: 0.02,
            watch_life: (Duration::from_secs(5), Duration::from_secs(60)),
        }
    }
}

/// The faults a proxy injected, by kind (`conflict`, `server-error`, `too-many-requests`,
/// `timeout`, `lost-answer`, `watch-dropped`), and how many requests it forwarded.
pub type Counts = BTreeMap<&'static str, u64>;

struct Shared {
    upstream: kube::Client,
    rates: Rates,
    enabled: AtomicBool,
    rng: Mutex<u64>,
    counts: Mutex<Counts>,
    /// Kinds owed ([`FaultProxy::owe`]), in order.
    owed: Mutex<Vec<&'static str>>,
    /// Resources whose watch events are held ([`FaultProxy::freeze`]).
    frozen: Mutex<std::collections::BTreeSet<String>>,
}

/// A running proxy; stops when dropped.
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// splitmix64: small, seedable, good enough to pick faults.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

enum Fault {
    None,
    Status(StatusCode, &'static str),
    Timeout(Duration),
    LoseAnswer,
}

impl Shared {
    /// A uniform number in [0, 1).
    fn unit(&self) -> f64 {
        let mut s = self
            .rng
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (next(&mut s) >> 11) as f64 / (1u64 << 53) as f64
    }

    fn count(&self, what: &'static str) {
        let mut c = self
            .counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *c.entry(what).or_default() += 1;
    }

    /// Takes the first owed kind this request can have, if any.
    fn owed(&self, write: bool, conflict_possible: bool) -> Option<Fault> {
        let mut owed = self
            .owed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Some(match take_owed(&mut owed, write, conflict_possible)? {
            "conflict" => Fault::Status(StatusCode::CONFLICT, "Conflict"),
            "lost-answer" => Fault::LoseAnswer,
            "server-error" => Fault::Status(StatusCode::INTERNAL_SERVER_ERROR, "InternalError"),
            "too-many-requests" => Fault::Status(StatusCode::TOO_MANY_REQUESTS, "TooManyRequests"),
            _ => Fault::Timeout(Duration::from_millis(1000)),
        })
    }

    /// Whether a dropped watch is owed (taking it).
    fn owes_watch_drop(&self) -> bool {
        let mut owed = self
            .owed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let i = owed.iter().position(|k| *k == "watch-dropped");
        i.map(|i| owed.remove(i)).is_some()
    }

    fn pick(&self, method: &Method, apply_patch: bool, watch: bool) -> Fault {
        if !self.enabled.load(Ordering::Relaxed) || watch {
            return Fault::None;
        }
        let write = *method != Method::GET && *method != Method::HEAD;
        let conflict_possible = *method == Method::PUT
            || *method == Method::DELETE
            || (*method == Method::PATCH && !apply_patch);
        if let Some(f) = self.owed(write, conflict_possible) {
            return f;
        }
        let r = self.rates;
        let x = self.unit();
        if x < r.reject {
            return match (self.unit() * 3.0) as u32 {
                0 if conflict_possible => Fault::Status(StatusCode::CONFLICT, "Conflict"),
                0 | 1 => Fault::Status(StatusCode::INTERNAL_SERVER_ERROR, "InternalError"),
                _ => Fault::Status(StatusCode::TOO_MANY_REQUESTS, "TooManyRequests"),
            };
        }
        if x < r.reject + r.timeout {
            return Fault::Timeout(Duration::from_millis(1000 + (self.unit() * 4000.0) as u64));
        }
        if write && x < r.reject + r.timeout + r.lost_answer {
            return Fault::LoseAnswer;
        }
        Fault::None
    }

    fn is_frozen(&self, resource: &str) -> bool {
        self.frozen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(resource)
    }

    fn watch_life(&self) -> Duration {
        let (lo, hi) = self.rates.watch_life;
        lo + (hi.saturating_sub(lo)).mul_f64(self.unit())
    }
}

/// Removes and returns the first kind in `owed` a request can have: a conflict only an update,
/// a non-apply patch or a delete (`conflict_possible`), a lost answer only a write; a dropped
/// watch never (watches are cut on their own path).
fn take_owed(
    owed: &mut Vec<&'static str>,
    write: bool,
    conflict_possible: bool,
) -> Option<&'static str> {
    let i = owed.iter().position(|k| match *k {
        "conflict" => conflict_possible,
        "lost-answer" => write,
        "server-error" | "too-many-requests" | "timeout" => true,
        _ => false,
    })?;
    Some(owed.remove(i))
}

/// A Kubernetes `Status` answer, as the API server writes one.
fn status(code: StatusCode, reason: &str, message: &str) -> Response {
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code.as_u16(),
    });
    let mut resp = Response::new(Body::from(body.to_string()));
    *resp.status_mut() = code;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if code == StatusCode::TOO_MANY_REQUESTS {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    resp
}

/// A body that fails at once: the server cuts the connection after the headers.
fn cut() -> Body {
    Body::from_stream(futures::stream::once(async {
        Err::<Bytes, _>(std::io::Error::other("answer cut by the fault proxy"))
    }))
}

async fn handle(State(s): State<Arc<Shared>>, req: Request) -> Response {
    let (mut parts, body) = req.into_parts();
    let query = parts.uri.query().unwrap_or_default();
    let watch = query
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1");
    let apply_patch = parts
        .headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/apply-patch"));
    // The collection a watch is on: the path's last segment (`.../pipelines`).
    let resource = parts
        .uri
        .path()
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_string();
    let fault = s.pick(&parts.method, apply_patch, watch);
    match fault {
        Fault::Status(code, reason) => {
            s.count(match code {
                StatusCode::CONFLICT => "conflict",
                StatusCode::TOO_MANY_REQUESTS => "too-many-requests",
                _ => "server-error",
            });
            let message = match code {
                StatusCode::CONFLICT => {
                    "Operation cannot be fulfilled: the object has been modified; please apply your changes to the latest version and try again"
                }
                StatusCode::TOO_MANY_REQUESTS => {
                    "the server has received too many requests and has asked us to try again later"
                }
                _ => "Internal error occurred: injected by the fault proxy",
            };
            return status(code, reason, message);
        }
        Fault::Timeout(hold) => {
            s.count("timeout");
            tokio::time::sleep(hold).await;
            return status(
                StatusCode::GATEWAY_TIMEOUT,
                "Timeout",
                "the server was unable to return a response in the time allotted, but may still be processing the request",
            );
        }
        Fault::None | Fault::LoseAnswer => {}
    }
    let bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(b) => b,
        Err(e) => return status(StatusCode::BAD_REQUEST, "BadRequest", &e.to_string()),
    };
    // The upstream client authenticates as itself and knows its own host.
    parts.headers.remove(header::HOST);
    parts.headers.remove(header::AUTHORIZATION);
    parts.uri = match parts.uri.path_and_query() {
        Some(pq) => match pq.as_str().parse() {
            Ok(u) => u,
            Err(_) => return status(StatusCode::BAD_REQUEST, "BadRequest", "bad path"),
        },
        None => "/".parse().unwrap_or_default(),
    };
    let upstream = http::Request::from_parts(parts, kube::client::Body::from(bytes));
    let answer = match s.upstream.send(upstream).await {
        Ok(a) => a,
        Err(e) => {
            // The API server is down (a restart): what a client sees from a load balancer.
            return status(
                StatusCode::SERVICE_UNAVAILABLE,
                "ServiceUnavailable",
                &format!("upstream: {e}"),
            );
        }
    };
    s.count("forwarded");
    let (mut head, body) = answer.into_parts();
    head.headers.remove(header::TRANSFER_ENCODING);
    head.headers.remove(header::CONNECTION);
    if matches!(fault, Fault::LoseAnswer) {
        s.count("lost-answer");
        head.headers.remove(header::CONTENT_LENGTH);
        return Response::from_parts(head, cut());
    }
    if watch {
        // Faults off, a watch lives until the API server ends it (the timer never fires).
        let life = if !s.enabled.load(Ordering::Relaxed) {
            Duration::from_secs(365 * 24 * 3600)
        } else if s.owes_watch_drop() {
            Duration::from_secs(1)
        } else {
            s.watch_life()
        };
        let shared = s.clone();
        let stream = body.into_data_stream();
        let timer = Box::pin(tokio::time::sleep(life));
        let cut_after = futures::stream::unfold(Some((stream, timer)), move |st| {
            let (shared, resource) = (shared.clone(), resource.clone());
            async move {
                let (mut stream, mut timer) = st?;
                tokio::select! {
                    item = stream.next() => {
                        // A frozen resource's events wait here, in order, until it thaws.
                        while shared.is_frozen(&resource) {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        item.map(|i| (i.map_err(std::io::Error::other), Some((stream, timer))))
                    }
                    () = &mut timer => {
                        shared.count("watch-dropped");
                        Some((Err(std::io::Error::other("watch cut by the fault proxy")), None))
                    }
                }
            }
        });
        return Response::from_parts(head, Body::from_stream(cut_after));
    }
    Response::from_parts(head, Body::new(body))
}

impl FaultProxy {
    /// Starts a proxy on a free loopback port that reaches the API server as `upstream`
    /// (faults off until [`FaultProxy::set_enabled`]).
    pub async fn start(upstream: kube::Config, rates: Rates, seed: u64) -> Result<FaultProxy> {
        let upstream = kube::Client::try_from(upstream).context("the proxy's upstream client")?;
        let shared = Arc::new(Shared {
            upstream,
            rates,
            enabled: AtomicBool::new(false),
            rng: Mutex::new(seed),
            counts: Mutex::default(),
            owed: Mutex::default(),
            frozen: Mutex::default(),
        });
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .context("binding the fault proxy")?;
        let addr = listener.local_addr()?;
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(shared.clone());
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::warn!("fault proxy stopped: {e}");
            }
        });
        Ok(FaultProxy { addr, shared, task })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Turns fault injection on or off (forwarding goes on either way).
    pub fn set_enabled(&self, on: bool) {
        self.shared.enabled.store(on, Ordering::Relaxed);
    }

    /// Owes one fault of `kind` (one of [`Counts`]' kinds): while enabled, the next request it
    /// applies to gets it (a conflict: an update, a non-apply patch or a delete; a lost answer:
    /// a write; a dropped watch: the next watch, cut after a second; the rest: any request).
    pub fn owe(&self, kind: &'static str) {
        self.shared
            .owed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(kind);
    }

    /// Holds every event of the watches on `resource` (a plural: `pipelines`) until
    /// [`FaultProxy::thaw`], faults on or off: a client's cache of it stays as it was, as while
    /// a slow relist is under way. Requests other than watches pass.
    pub fn freeze(&self, resource: &str) {
        self.shared
            .frozen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(resource.to_string());
    }

    /// Releases the events [`FaultProxy::freeze`] held, in order.
    pub fn thaw(&self, resource: &str) {
        self.shared
            .frozen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(resource);
    }

    /// Kinds owed and not yet injected.
    pub fn owed(&self) -> usize {
        self.shared
            .owed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }

    /// What was injected so far.
    pub fn counts(&self) -> Counts {
        self.shared
            .counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Writes a kubeconfig that reaches the API server through this proxy. It carries no
    /// credentials: the proxy adds its upstream identity.
    pub fn write_kubeconfig(&self, path: &Path) -> Result<()> {
        let kubeconfig = format!(
            "apiVersion: v1
kind: Config
clusters:
- name: fault-proxy
  cluster:
    server: http://{}
users:
- name: through-proxy
  user: {{}}
contexts:
- name: fault-proxy
  context:
    cluster: fault-proxy
    user: through-proxy
current-context: fault-proxy
",
            self.addr
        );
        std::fs::write(path, kubeconfig).with_context(|| format!("writing {}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::take_owed;

    #[test]
    fn an_owed_fault_goes_to_the_first_request_it_applies_to() {
        let mut owed = vec!["conflict", "lost-answer", "watch-dropped", "timeout"];
        // A GET: neither a conflict nor a lost answer; the timeout.
        assert_eq!(take_owed(&mut owed, false, false), Some("timeout"));
        // A server-side apply: a write, no conflict.
        assert_eq!(take_owed(&mut owed, true, false), Some("lost-answer"));
        assert_eq!(take_owed(&mut owed, false, false), None);
        // An update.
        assert_eq!(take_owed(&mut owed, true, true), Some("conflict"));
        assert_eq!(owed, vec!["watch-dropped"]);
        assert_eq!(take_owed(&mut owed, true, true), None);
    }
}
