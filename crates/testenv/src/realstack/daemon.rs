//! The pipeline daemon stand-in: what a pipeline's daemon pod would answer the Numaflow
//! controller, since no container runs here. The controller dials
//! `<pipeline>-daemon-svc.<namespace>.svc:4327` over TLS (certificate not verified) and asks
//! `ListBuffers` whether anything is still pending before it declares a pause drained or lets a
//! deleted pipeline go. Each pod's `/etc/hosts` sends those names to one forwarded port; the
//! namespace comes from the request's `:authority`, the pipeline from the request.
//!
//! What it answers, in the absence of a running data plane: a pipeline holds messages while one
//! of its vertex pods is not Ready (data stuck behind a vertex whose image cannot be pulled, or
//! that crash-loops, never drains). Messages stay in the buffers when the pods go: once a
//! vertex after the source had a pod not Ready while a source ran (data came in but could not
//! go on), the pipeline holds messages until that vertex runs with Ready pods only, even while
//! scaled to zero in between. Otherwise it is drained. A test can direct a pipeline to hold messages for a while or
//! for good ([`DaemonStandIn::set_pending`], [`DaemonStandIn::drain_after`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::runtime::reflector::Store;
use numaplane_api::numaflow::Pipeline;

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

/// By pipeline (namespace, name): the vertices messages are stuck at, behind a pod that was not
/// Ready.
type Holding = Arc<Mutex<HashMap<(String, String), BTreeSet<String>>>>;

/// How often the pods are looked at to update [`Holding`]: pods stay Ready or not for seconds.
const SAMPLE_EVERY: Duration = Duration::from_millis(250);

/// Handle on the running stand-in: where it listens and what it answers.
#[derive(Clone)]
pub struct DaemonStandIn {
    addr: SocketAddr,
    pending: Pending,
    calls: Arc<Mutex<HashMap<(String, String), u64>>>,
    holding: Holding,
    pods: Store<Pod>,
    pipelines: Store<Pipeline>,
}

impl DaemonStandIn {
    /// Starts the gRPC server on a free loopback port, on the current Tokio runtime, serving TLS
    /// with the given certificate and key (PEM); `pods` are Numaflow's pods, as a store, and
    /// `pipelines` every Pipeline.
    pub async fn start(
        cert_pem: &str,
        key_pem: &str,
        pods: Store<Pod>,
        pipelines: Store<Pipeline>,
    ) -> Result<Self> {
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .context("binding the daemon stand-in")?;
        let addr = listener.local_addr()?;
        let standin = DaemonStandIn {
            addr,
            pending: Pending::default(),
            calls: Arc::default(),
            holding: Holding::default(),
            pods,
            pipelines,
        };
        tokio::spawn(standin.clone().track_holding());
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
    /// not Ready or messages are stuck from an earlier time, else 0.
    fn pending_now(&self, namespace: &str, pipeline: &str) -> i64 {
        let key = (namespace.to_string(), pipeline.to_string());
        let directed = self.pending.lock().ok().and_then(|p| p.get(&key).copied());
        if let Some(d) = directed
            && d.until.is_none_or(|t| Instant::now() < t)
        {
            return d.n;
        }
        let pods = vertex_pods(&self.pods.state());
        let stuck = pods
            .get(&key)
            .is_some_and(|vs| vs.values().any(|r| r.unready > 0));
        let held = self
            .holding
            .lock()
            .is_ok_and(|h| h.get(&key).is_some_and(|s| !s.is_empty()));
        i64::from(stuck || held)
    }

    /// Samples the pods for as long as the stand-in runs and keeps [`Holding`] up to date.
    async fn track_holding(self) {
        let mut tick = tokio::time::interval(SAMPLE_EVERY);
        loop {
            tick.tick().await;
            let mut pods = vertex_pods(&self.pods.state());
            let pipelines = self.pipelines.state();
            let Ok(mut holding) = self.holding.lock() else {
                continue;
            };
            let mut live = HashSet::new();
            for pl in &pipelines {
                let key = (pl.namespace().unwrap_or_default(), pl.name_any());
                // The vertices as the spec has them now: a vertex taken out of the spec takes
                // its buffer with it (the daemon lists the current vertices' buffers only).
                let mut vertices = BTreeMap::new();
                for v in pl.spec["vertices"].as_array().into_iter().flatten() {
                    let Some(name) = v["name"].as_str() else {
                        continue;
                    };
                    let mut r = pods
                        .get_mut(&key)
                        .and_then(|p| p.remove(name))
                        .unwrap_or_default();
                    r.source = v.get("source").is_some_and(|s| !s.is_null());
                    vertices.insert(name.to_string(), r);
                }
                let stuck = holding.entry(key.clone()).or_default();
                update_stuck(stuck, &vertices);
                stuck.retain(|v| vertices.contains_key(v));
                live.insert(key);
            }
            holding.retain(|k, _| live.contains(k));
        }
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

/// How many of a vertex's live (not terminating) pods are Ready and not, and whether the
/// pipeline's spec makes it a source.
#[derive(Default, Debug, PartialEq)]
struct Readiness {
    source: bool,
    ready: usize,
    unready: usize,
}

/// Updates the vertices messages are stuck at, from one look at a pipeline's vertex pods.
/// Messages get stuck at a vertex after the source with a pod not Ready while a source runs
/// (data came in but cannot go on); they are processed once that vertex has Ready pods only.
/// With no pods (scaled to zero) the buffers keep what they had.
fn update_stuck(stuck: &mut BTreeSet<String>, vertices: &BTreeMap<String, Readiness>) {
    let ingesting = vertices.values().any(|r| r.source && r.ready > 0);
    for (name, r) in vertices.iter().filter(|(_, r)| !r.source) {
        if r.unready > 0 && ingesting {
            stuck.insert(name.clone());
        } else if r.unready == 0 && r.ready > 0 {
            stuck.remove(name);
        }
    }
}

/// The live vertex pods' readiness, by (namespace, pipeline) and vertex.
fn vertex_pods(pods: &[Arc<Pod>]) -> HashMap<(String, String), BTreeMap<String, Readiness>> {
    let mut by_pipeline: HashMap<_, BTreeMap<String, Readiness>> = HashMap::new();
    for p in pods {
        let labels = p.labels();
        let (Some(ns), Some(pipeline), Some(vertex)) = (
            p.namespace(),
            labels.get("numaflow.numaproj.io/pipeline-name"),
            labels.get("numaflow.numaproj.io/vertex-name"),
        ) else {
            continue;
        };
        if p.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let r = by_pipeline
            .entry((ns, pipeline.clone()))
            .or_default()
            .entry(vertex.clone())
            .or_default();
        if super::metrics::is_ready(p) {
            r.ready += 1;
        } else {
            r.unready += 1;
        }
    }
    by_pipeline
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
    fn messages_stay_at_a_vertex_until_it_runs() {
        let look = |stuck: &mut BTreeSet<String>, vs: &[(&str, usize, usize)]| {
            let vs = vs
                .iter()
                .map(|&(n, ready, unready)| {
                    let source = n == "in";
                    (
                        n.to_string(),
                        Readiness {
                            source,
                            ready,
                            unready,
                        },
                    )
                })
                .collect();
            update_stuck(stuck, &vs);
        };
        let mut stuck = BTreeSet::new();
        look(&mut stuck, &[("in", 0, 1), ("cat", 0, 1)]);
        assert!(stuck.is_empty(), "nothing ran: nothing came in");
        look(&mut stuck, &[("in", 0, 1), ("cat", 1, 0), ("out", 0, 1)]);
        assert!(stuck.is_empty(), "the source never ran: nothing came in");
        look(&mut stuck, &[("in", 1, 0), ("cat", 0, 1), ("out", 1, 0)]);
        assert_eq!(stuck, BTreeSet::from(["cat".to_string()]), "in but not out");
        look(&mut stuck, &[]);
        look(&mut stuck, &[("out", 1, 0)]);
        assert!(
            !stuck.is_empty(),
            "scaled down, or cat not back yet: still held"
        );
        look(&mut stuck, &[("cat", 1, 1), ("out", 1, 0)]);
        assert!(!stuck.is_empty(), "cat still has a pod not Ready");
        look(&mut stuck, &[("cat", 1, 0), ("out", 1, 0)]);
        assert!(stuck.is_empty(), "cat runs: the backlog is processed");
    }

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
