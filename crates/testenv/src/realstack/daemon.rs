//! The pipeline daemon stand-in: what a pipeline's daemon pod would answer the Numaflow
//! controller, since no container runs here. The controller dials
//! `<pipeline>-daemon-svc.<namespace>.svc:4327` over TLS (certificate not verified) and asks
//! `ListBuffers` whether anything is still pending before it declares a pause drained or lets a
//! deleted pipeline go. Each pod's `/etc/hosts` sends those names to one forwarded port; the
//! namespace comes from the request's `:authority`, the pipeline from the request.
//!
//! What it answers, in the absence of a running data plane: a pipeline holds messages while one
//! of its vertex pods is not Ready (data stuck behind a vertex whose image cannot be pulled, or
//! that crash-loops, never drains), else it is drained; a test can direct a pipeline to hold
//! messages for a while or for good ([`DaemonStandIn::set_pending`],
//! [`DaemonStandIn::drain_after`]).

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::runtime::reflector::Store;

use anyhow::{Context, Result};
use tonic::transport::{Identity, Server, ServerTlsConfig};
use tonic::{Request, Response, Status};

/// The generated `daemon` package.
pub mod proto {
    tonic::include_proto!("daemon");
}

use proto::daemon_service_server::{DaemonService, DaemonServiceServer};
use proto::{BufferInfo, ListBuffersRequest, ListBuffersResponse};

/// The port the controller dials daemons on.
pub const DAEMON_PORT: u16 = 4327;

/// Metadata key carrying the HTTP/2 `:authority` into the handler (pseudo-headers are not
/// metadata).
const AUTHORITY: &str = "x-standin-authority";

/// A directed answer: `n` messages pending until `until` (for good when `None`).
#[derive(Clone, Copy)]
struct Directed {
    n: i64,
    until: Option<Instant>,
}

type Pending = Arc<Mutex<HashMap<(String, String), Directed>>>;

/// Handle on the running stand-in: where it listens and what it answers.
#[derive(Clone)]
pub struct DaemonStandIn {
    addr: SocketAddr,
    pending: Pending,
    calls: Arc<Mutex<HashMap<(String, String), u64>>>,
    pods: Store<Pod>,
}

impl DaemonStandIn {
    /// Starts the gRPC server on a free loopback port, on the current Tokio runtime, serving TLS
    /// with the given certificate and key (PEM); `pods` are Numaflow's pods, as a store.
    pub async fn start(cert_pem: &str, key_pem: &str, pods: Store<Pod>) -> Result<Self> {
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .context("binding the daemon stand-in")?;
        let addr = listener.local_addr()?;
        let standin = DaemonStandIn {
            addr,
            pending: Pending::default(),
            calls: Arc::default(),
            pods,
        };
        let service = DaemonServiceServer::new(standin.clone());
        let tls = ServerTlsConfig::new().identity(Identity::from_pem(cert_pem, key_pem));
        let router = Server::builder()
            .tls_config(tls)
            .context("daemon stand-in TLS")?
            .layer(tower::util::MapRequestLayer::new(
                copy_authority as fn(GrpcRequest) -> GrpcRequest,
            ))
            .add_service(service);
        let incoming = tokio_stream_listener(listener);
        tokio::spawn(async move {
            if let Err(e) = router.serve_with_incoming(incoming).await {
                tracing::warn!("daemon stand-in stopped: {e}");
            }
        });
        Ok(standin)
    }

    /// The host address the pods' port [`DAEMON_PORT`] is forwarded to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Makes `pipeline` in `namespace` report `n` pending messages from now on (0: drained
    /// whatever its pods).
    pub fn set_pending(&self, namespace: &str, pipeline: &str, n: i64) {
        self.direct(namespace, pipeline, Directed { n, until: None });
    }

    /// Makes `pipeline` hold messages for `d` from now, then answer as usual.
    pub fn drain_after(&self, namespace: &str, pipeline: &str, d: Duration) {
        let until = Some(Instant::now() + d);
        self.direct(namespace, pipeline, Directed { n: 100, until });
    }

    fn direct(&self, namespace: &str, pipeline: &str, d: Directed) {
        if let Ok(mut p) = self.pending.lock() {
            p.insert((namespace.to_string(), pipeline.to_string()), d);
        }
    }

    /// What the pipeline's buffers hold now: as directed, else 1 while one of its vertex pods is
    /// not Ready, else 0.
    fn pending_now(&self, namespace: &str, pipeline: &str) -> i64 {
        let key = (namespace.to_string(), pipeline.to_string());
        let directed = self.pending.lock().ok().and_then(|p| p.get(&key).copied());
        if let Some(d) = directed
            && d.until.is_none_or(|t| Instant::now() < t)
        {
            return d.n;
        }
        let stuck = self.pods.state().iter().any(|p| {
            p.namespace().as_deref() == Some(namespace)
                && p.labels()
                    .get("numaflow.numaproj.io/pipeline-name")
                    .map(String::as_str)
                    == Some(pipeline)
                && p.labels().contains_key("numaflow.numaproj.io/vertex-name")
                && p.metadata.deletion_timestamp.is_none()
                && !super::metrics::is_ready(p)
        });
        i64::from(stuck)
    }

    /// How many times the controller asked about `pipeline` in `namespace`.
    pub fn calls(&self, namespace: &str, pipeline: &str) -> u64 {
        self.calls
            .lock()
            .ok()
            .and_then(|c| {
                c.get(&(namespace.to_string(), pipeline.to_string()))
                    .copied()
            })
            .unwrap_or(0)
    }
}

/// `<pipeline>-daemon-svc.<namespace>.svc[...]:port` → namespace.
fn namespace_of(authority: &str) -> Option<&str> {
    let host = authority.split(':').next()?;
    let mut parts = host.split('.');
    let svc = parts.next()?;
    svc.ends_with("-daemon-svc").then_some(())?;
    parts.next()
}

#[tonic::async_trait]
impl DaemonService for DaemonStandIn {
    async fn list_buffers(
        &self,
        request: Request<ListBuffersRequest>,
    ) -> Result<Response<ListBuffersResponse>, Status> {
        let authority = request
            .metadata()
            .get(AUTHORITY)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let ns = namespace_of(&authority)
            .ok_or_else(|| Status::invalid_argument(format!("unexpected authority {authority:?}")))?
            .to_string();
        let pipeline = request.into_inner().pipeline;
        let key = (ns, pipeline.clone());
        if let Ok(mut c) = self.calls.lock() {
            *c.entry(key.clone()).or_default() += 1;
        }
        let pending = self.pending_now(&key.0, &key.1);
        Ok(Response::new(ListBuffersResponse {
            buffers: vec![BufferInfo {
                pipeline: pipeline.clone(),
                buffer_name: format!("{}-{pipeline}-0", key.0),
                pending_count: Some(pending),
                ack_pending_count: Some(0),
                total_messages: Some(pending),
                buffer_length: Some(30000),
                buffer_usage_limit: Some(0.8),
                buffer_usage: Some(pending as f64 / 30000.0),
                is_full: Some(false),
            }],
        }))
    }
}

type GrpcRequest = http::Request<tonic::body::Body>;

/// Copies the request's URI authority (the HTTP/2 `:authority`) into a metadata header.
fn copy_authority(mut req: GrpcRequest) -> GrpcRequest {
    let authority = req.uri().authority().map(|a| a.to_string());
    if let Some(v) = authority.and_then(|a| http::HeaderValue::from_str(&a).ok()) {
        req.headers_mut().insert(AUTHORITY, v);
    }
    req
}

fn tokio_stream_listener(
    listener: tokio::net::TcpListener,
) -> impl futures::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    futures::stream::unfold(listener, |l| async move {
        let next = l.accept().await.map(|(s, _)| s);
        Some((next, l))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_from_the_daemon_service_name() {
        assert_eq!(namespace_of("pr-0-daemon-svc.ns-a.svc:4327"), Some("ns-a"));
        assert_eq!(
            namespace_of("pr-0-daemon-svc.ns-a.svc.cluster.local:4327"),
            Some("ns-a")
        );
        assert_eq!(namespace_of("isbsvc-x.ns.svc:4222"), None);
        assert_eq!(namespace_of(""), None);
    }
}
