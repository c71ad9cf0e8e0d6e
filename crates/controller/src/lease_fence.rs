//! Fencing for leader election. The lease manager says when this replica gained or lost the
//! lease, but a replica that was stopped (SIGSTOP, a frozen VM, a starved node) learns that it
//! lost the lease only once it runs again, and its reconciles run again at the same moment. So
//! writes are also bounded in time: a replica writes only until its own last renewal, as the API
//! server stored it, plus the lease duration minus a margin. A standby takes the lease only once
//! that renewal is a full lease duration old, so the margin separates the old leader's last
//! write from the new one's first (given clocks that agree within the margin, which every lease
//! assumes). The check runs in the client's request stack, right before a request leaves.

use http::header::{HeaderValue, USER_AGENT};
use http::{Method, Request, Response};
use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;
use tower::{BoxError, Layer, Service};
use tracing::{debug, warn};

/// Until when (Unix milliseconds) this replica may write.
#[derive(Debug)]
pub struct Fence {
    until: watch::Sender<i64>,
    /// Counts the renewals that opened a closed fence (the first one, or one after a lapse).
    reopened: watch::Sender<u64>,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl Fence {
    /// Always open: a replica without leader election writes whenever it wants.
    pub fn open() -> Self {
        Self {
            until: watch::Sender::new(i64::MAX),
            reopened: watch::Sender::new(0),
        }
    }

    /// Closed until a renewal of this replica's lease is seen.
    pub fn closed() -> Self {
        Self {
            until: watch::Sender::new(0),
            reopened: watch::Sender::new(0),
        }
    }

    pub fn allows(&self) -> bool {
        now_ms() < *self.until.borrow()
    }

    /// Changes whenever a renewal opens the fence after it was closed: reconciles skipped while
    /// it was closed (a renewal seen late) are due again.
    pub fn reopenings(&self) -> watch::Receiver<u64> {
        self.reopened.subscribe()
    }

    /// Waits until writes are allowed (right after the lease was won, its renewal is on its way).
    pub async fn opened(&self) {
        let mut rx = self.until.subscribe();
        let _ = rx.wait_for(|&u| now_ms() < u).await;
    }

    /// Takes in a state of the lease: this replica's renewal opens the fence until
    /// `renewTime + leaseDuration - margin`; anyone else holding it (or nobody) closes it.
    pub fn observe(&self, lease: &Lease, identity: &str, margin: Duration) {
        let spec = lease.spec.as_ref();
        let mine = spec.and_then(|s| s.holder_identity.as_deref()) == Some(identity);
        let until = spec
            .filter(|_| mine)
            .and_then(|s| Some((s.renew_time.as_ref()?, s.lease_duration_seconds?)))
            .map_or(0, |(renewed, secs)| {
                let margin = i64::try_from(margin.as_millis()).unwrap_or(i64::MAX);
                renewed
                    .0
                    .as_millisecond()
                    .saturating_add(i64::from(secs) * 1000)
                    .saturating_sub(margin)
            });
        let now = now_ms();
        let mut reopened = false;
        self.until.send_if_modified(|u| {
            reopened = *u <= now && now < until;
            let changed = *u != until;
            *u = until;
            changed
        });
        if reopened {
            self.reopened.send_modify(|n| *n += 1);
        }
    }

    fn close(&self) {
        self.until.send_replace(0);
    }
}

/// Follows the lease with a watch, opening and closing `fence`; runs until dropped.
pub async fn follow(
    client: Client,
    namespace: &str,
    name: &str,
    identity: &str,
    margin: Duration,
    fence: Arc<Fence>,
) {
    use futures::StreamExt;
    use kube::runtime::WatchStreamExt;
    let api: Api<Lease> = Api::namespaced(client, namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = std::pin::pin!(watcher::watcher(api, config).default_backoff());
    while let Some(event) = events.next().await {
        match event {
            Ok(Event::Apply(lease) | Event::InitApply(lease)) => {
                fence.observe(&lease, identity, margin);
                debug!(open = fence.allows(), "lease observed");
            }
            Ok(Event::Delete(_)) => fence.close(),
            Ok(Event::Init | Event::InitDone) => {}
            // The backoff restarts the watch; until then the fence closes by time.
            Err(e) => warn!(error = %e, "watching the lease failed"),
        }
    }
}

/// A client layer that names the replica in its User-Agent (so the API server's audit log
/// tells replicas apart) and refuses any write but the lease's own while the fence is closed.
#[derive(Clone)]
pub struct FenceLayer {
    fence: Arc<Fence>,
    user_agent: HeaderValue,
    refused: prometheus_client::metrics::counter::Counter,
}

impl FenceLayer {
    pub fn new(
        fence: Arc<Fence>,
        user_agent: &str,
        refused: prometheus_client::metrics::counter::Counter,
    ) -> Self {
        let user_agent = HeaderValue::from_str(user_agent)
            .unwrap_or_else(|_| HeaderValue::from_static("numaplane"));
        Self {
            fence,
            user_agent,
            refused,
        }
    }
}

impl<S> Layer<S> for FenceLayer {
    type Service = Fenced<S>;
    fn layer(&self, inner: S) -> Self::Service {
        Fenced {
            inner,
            layer: self.clone(),
        }
    }
}

#[derive(Clone)]
pub struct Fenced<S> {
    inner: S,
    layer: FenceLayer,
}

/// The error a refused write fails with.
#[derive(Debug, thiserror::Error)]
#[error("write refused: this replica's lease renewal is overdue, another replica may lead now")]
pub struct Refused;

/// Writes to the lease itself are the lease manager's and always pass.
fn fenced_request(method: &Method, path: &str) -> bool {
    let write = matches!(
        *method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    );
    write && !path.starts_with("/apis/coordination.k8s.io/")
}

impl<S, B, RB> Service<Request<B>> for Fenced<S>
where
    S: Service<Request<B>, Response = Response<RB>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        if fenced_request(req.method(), req.uri().path()) && !self.layer.fence.allows() {
            self.layer.refused.inc();
            warn!(method = %req.method(), path = req.uri().path(), "write refused: lease not fresh");
            return Box::pin(async { Err(Refused.into()) });
        }
        req.headers_mut()
            .insert(USER_AGENT, self.layer.user_agent.clone());
        let fut = self.inner.call(req);
        Box::pin(async move { fut.await.map_err(Into::into) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    use k8s_openapi::jiff::{SignedDuration, Timestamp};

    fn lease(holder: Option<&str>, renewed_ago: Duration) -> Lease {
        let renewed = Timestamp::now() - SignedDuration::try_from(renewed_ago).expect("duration");
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: holder.map(Into::into),
                renew_time: Some(MicroTime(renewed)),
                lease_duration_seconds: Some(15),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    const MARGIN: Duration = Duration::from_secs(4);

    #[test]
    fn a_fresh_renewal_of_our_own_opens_the_fence() {
        let f = Fence::closed();
        assert!(!f.allows());
        f.observe(&lease(Some("me"), Duration::from_secs(1)), "me", MARGIN);
        assert!(f.allows());
    }

    #[test]
    fn a_renewal_older_than_the_duration_less_the_margin_keeps_it_closed() {
        // A stale event (replayed after a stop) must not reopen it: 12 s + 4 s > 15 s.
        let f = Fence::closed();
        f.observe(&lease(Some("me"), Duration::from_secs(12)), "me", MARGIN);
        assert!(!f.allows());
        f.observe(&lease(Some("me"), Duration::from_secs(10)), "me", MARGIN);
        assert!(f.allows());
    }

    #[test]
    fn a_renewal_after_a_lapse_is_announced() {
        let f = Fence::closed();
        let rx = f.reopenings();
        f.observe(&lease(Some("me"), Duration::from_secs(1)), "me", MARGIN);
        assert_eq!(*rx.borrow(), 1, "the first renewal opens it");
        f.observe(&lease(Some("me"), Duration::ZERO), "me", MARGIN);
        assert_eq!(*rx.borrow(), 1, "a renewal while open is no reopening");
        f.observe(&lease(Some("me"), Duration::from_secs(12)), "me", MARGIN);
        assert!(!f.allows(), "a late view of an old renewal: lapsed");
        f.observe(&lease(Some("me"), Duration::ZERO), "me", MARGIN);
        assert_eq!(*rx.borrow(), 2);
    }

    #[test]
    fn another_holder_or_none_closes_it() {
        let f = Fence::closed();
        f.observe(&lease(Some("me"), Duration::ZERO), "me", MARGIN);
        f.observe(&lease(Some("other"), Duration::ZERO), "me", MARGIN);
        assert!(!f.allows());
        f.observe(&lease(Some("me"), Duration::ZERO), "me", MARGIN);
        f.observe(&lease(None, Duration::ZERO), "me", MARGIN);
        assert!(!f.allows());
        assert!(Fence::open().allows());
    }

    #[test]
    fn only_writes_other_than_the_lease_are_fenced() {
        let lease = "/apis/coordination.k8s.io/v1/namespaces/numaplane-system/leases/x";
        let pipes = "/apis/numaflow.numaproj.io/v1alpha1/namespaces/ns/pipelines/p";
        assert!(!fenced_request(&Method::PATCH, lease));
        assert!(!fenced_request(&Method::GET, pipes));
        for m in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
            assert!(fenced_request(&m, pipes), "{m}");
        }
    }

    #[tokio::test]
    async fn a_closed_fence_refuses_a_write_before_it_leaves() {
        let fence = Arc::new(Fence::closed());
        let refused = prometheus_client::metrics::counter::Counter::default();
        let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = sent.clone();
        let inner = tower::service_fn(move |req: Request<()>| {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let ua = req.headers().get(USER_AGENT).cloned();
            async move { Ok::<_, BoxError>(Response::new(ua)) }
        });
        let mut svc =
            FenceLayer::new(fence.clone(), "numaplane/test (a)", refused.clone()).layer(inner);
        let write = || {
            Request::patch("/api/v1/namespaces/ns/configmaps/c")
                .body(())
                .expect("request")
        };
        let err = svc.call(write()).await.expect_err("refused");
        assert!(
            err.to_string().contains("lease renewal is overdue"),
            "{err}"
        );
        assert_eq!(sent.load(std::sync::atomic::Ordering::SeqCst), 0);
        assert_eq!(refused.get(), 1);
        // Reads pass, and carry the replica's name.
        let read = Request::get("/api/v1/pods").body(()).expect("request");
        let res = svc.call(read).await.expect("read");
        assert_eq!(
            res.body().as_ref().map(|v| v.to_str().unwrap_or_default()),
            Some("numaplane/test (a)")
        );
        fence.observe(&lease(Some("a"), Duration::ZERO), "a", MARGIN);
        svc.call(write()).await.expect("open: the write leaves");
        assert_eq!(sent.load(std::sync::atomic::Ordering::SeqCst), 2);
    }
}
