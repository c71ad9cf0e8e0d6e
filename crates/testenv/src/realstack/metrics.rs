//! The metrics stand-in: what Numaflow's vertex and MonoVertex pods would export for Prometheus
//! to scrape, since no container runs on KWOK's pods (pods on the real node are left to their own
//! metrics). While a pod is Ready its counters grow:
//! `forwarder_read_total` / `forwarder_ack_total{pipeline, vertex}` for pipeline vertices,
//! `monovtx_read_total` / `monovtx_ack_total{mvtx_name}` for MonoVertices: the names and labels
//! Numaflow 1.8.1's data plane exports (checked against the real pods by the data-plane suite,
//! docs/dataplane.md), without the `numaflow_` prefix the reference's sample templates query.
//! Each series also carries `namespace`, which a cluster's Prometheus adds from Kubernetes
//! discovery and which this statically scraped target must add itself. A pod running a sink image whose
//! name contains `failure` (the samples' `sink-log-failure`) reads without acknowledging
//! anything, the way a failing sink looks from outside; a test can also direct any vertex or
//! MonoVertex to do so ([`MetricsStandIn::never_ack`]).

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::runtime::reflector::Store;

/// The counters a pipeline vertex exports (read, then acknowledged) and the labels of theirs the
/// stand-in sets besides `namespace`; the data-plane suite checks both against the real pods.
pub const VERTEX_FAMILIES: [&str; 2] = ["forwarder_read_total", "forwarder_ack_total"];
pub const VERTEX_LABELS: [&str; 2] = ["pipeline", "vertex"];
/// The same for a MonoVertex.
pub const MONOVERTEX_FAMILIES: [&str; 2] = ["monovtx_read_total", "monovtx_ack_total"];
pub const MONOVERTEX_LABELS: [&str; 1] = ["mvtx_name"];

/// Messages per second a Ready pod reads (and acknowledges, unless told not to).
const RATE: f64 = 10.0;
const TICK: Duration = Duration::from_millis(500);

const PIPELINE: &str = "numaflow.numaproj.io/pipeline-name";
const VERTEX: &str = "numaflow.numaproj.io/vertex-name";
const MONO_VERTEX: &str = "numaflow.numaproj.io/mono-vertex-name";

/// A series' identity: `(namespace, pipeline or MonoVertex, vertex)`; the vertex is empty for a
/// MonoVertex.
type Key = (String, String, String);

#[derive(Default)]
struct Counters {
    read: f64,
    ack: f64,
}

#[derive(Default)]
struct State {
    series: BTreeMap<Key, Counters>,
    never_ack: HashSet<Key>,
}

/// Handle on the running stand-in.
#[derive(Clone)]
pub struct MetricsStandIn {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
}

impl MetricsStandIn {
    /// Serves `/metrics` on a free loopback port and counts for the Ready pods of `pods` (Numaflow's
    /// pods, as a store), on the current Tokio runtime.
    pub async fn start(pods: Store<Pod>) -> Result<Self> {
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .context("binding the metrics stand-in")?;
        let addr = listener.local_addr()?;
        let standin = MetricsStandIn {
            addr,
            state: Arc::default(),
        };
        let served = standin.clone();
        let app = axum::Router::new().route(
            "/metrics",
            axum::routing::get(move || {
                let s = served.clone();
                async move { s.exposition() }
            }),
        );
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::warn!("metrics stand-in stopped: {e}");
            }
        });
        let counting = standin.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(TICK);
            loop {
                tick.tick().await;
                counting.count(&pods);
            }
        });
        Ok(standin)
    }

    /// Where Prometheus scrapes it.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Makes vertex `vertex` of pipeline `name` (or MonoVertex `name` when `vertex` is `None`)
    /// read without ever acknowledging.
    pub fn never_ack(&self, namespace: &str, name: &str, vertex: Option<&str>) {
        if let Ok(mut st) = self.state.lock() {
            st.never_ack.insert((
                namespace.to_string(),
                name.to_string(),
                vertex.unwrap_or_default().to_string(),
            ));
        }
    }

    fn count(&self, pods: &Store<Pod>) {
        let step = RATE * TICK.as_secs_f64();
        let Ok(mut st) = self.state.lock() else {
            return;
        };
        for pod in pods.state() {
            // Pods on the real node export their own metrics, which Prometheus scrapes from them;
            // counting them here too would hide what they really do (a sink failing every message
            // would look like one acknowledging).
            if !is_ready(&pod) || on_real_node(&pod) {
                continue;
            }
            let Some(key) = series_of(&pod) else {
                continue;
            };
            let acks = !st.never_ack.contains(&key) && !runs_failing_sink(&pod);
            let c = st.series.entry(key).or_default();
            c.read += step;
            if acks {
                c.ack += step;
            }
        }
    }

    fn exposition(&self) -> String {
        let Ok(st) = self.state.lock() else {
            return String::new();
        };
        let mut out = String::new();
        let families = [
            (VERTEX_FAMILIES[0], false, true),
            (VERTEX_FAMILIES[1], false, false),
            (MONOVERTEX_FAMILIES[0], true, true),
            (MONOVERTEX_FAMILIES[1], true, false),
        ];
        for (family, mono, read) in families {
            let _ = writeln!(out, "# TYPE {family} counter");
            for ((ns, name, vertex), c) in &st.series {
                if vertex.is_empty() != mono {
                    continue;
                }
                let v = if read { c.read } else { c.ack };
                let labels = if mono {
                    format!("namespace=\"{ns}\",{}=\"{name}\"", MONOVERTEX_LABELS[0])
                } else {
                    format!(
                        "namespace=\"{ns}\",{}=\"{name}\",{}=\"{vertex}\"",
                        VERTEX_LABELS[0], VERTEX_LABELS[1]
                    )
                };
                let _ = writeln!(out, "{family}{{{labels}}} {v}");
            }
        }
        out
    }
}

/// Whether a container runs an image whose last path segment names a failing sink (user
/// containers are sidecars, `initContainers` with `restartPolicy: Always`, since Numaflow 1.5).
fn runs_failing_sink(pod: &Pod) -> bool {
    pod.spec.as_ref().is_some_and(|s| {
        s.containers
            .iter()
            .chain(s.init_containers.iter().flatten())
            .any(|c| {
                c.image
                    .as_deref()
                    .and_then(|i| i.rsplit('/').next())
                    .is_some_and(|last| last.contains("failure"))
            })
    })
}

fn on_real_node(pod: &Pod) -> bool {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(crate::realnode::NODE_NAME)
}

pub(crate) fn is_ready(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The series a pod exports to: a pipeline vertex pod, or a MonoVertex pod (daemons and jobs
/// carry neither pair of labels and export nothing here).
fn series_of(pod: &Pod) -> Option<Key> {
    let l = pod.labels();
    let ns = pod.namespace().unwrap_or_default();
    if let (Some(p), Some(v)) = (l.get(PIPELINE), l.get(VERTEX)) {
        return Some((ns, p.clone(), v.clone()));
    }
    let mv = l.get(MONO_VERTEX)?;
    // The MonoVertex daemon pod carries the MonoVertex label too.
    (l.get("app.kubernetes.io/component").map(String::as_str) == Some("mono-vertex"))
        .then(|| (ns, mv.clone(), String::new()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(labels: &[(&str, &str)], ready: bool) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns",
                         "labels": labels.iter().map(|(k, v)| (k.to_string(), v.to_string()))
                             .collect::<BTreeMap<_, _>>()},
            "status": {"conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}
        }))
        .expect("pod")
    }

    #[test]
    fn a_failing_sink_image_is_recognised() {
        let mut p = pod(&[], true);
        p.spec = Some(
            serde_json::from_value(serde_json::json!({"containers": [
                {"name": "numa", "image": "quay.io/numaproj/numaflow:v1.8.1"},
                {"name": "udsink", "image": "quay.io/numaio/numaflow-go/sink-log-failure:stable"}
            ]}))
            .expect("spec"),
        );
        assert!(runs_failing_sink(&p));
        p.spec = Some(
            serde_json::from_value(serde_json::json!({"containers": [
                {"name": "udsink", "image": "quay.io/failure-org/sink-log:stable"}
            ]}))
            .expect("spec"),
        );
        assert!(!runs_failing_sink(&p));
    }

    #[test]
    fn the_exposition_carries_numaflows_names_and_labels() {
        let standin = MetricsStandIn {
            addr: (Ipv4Addr::LOCALHOST, 0).into(),
            state: Arc::default(),
        };
        if let Ok(mut st) = standin.state.lock() {
            st.series.insert(
                ("ns".into(), "pr-1".into(), "out".into()),
                Counters {
                    read: 5.0,
                    ack: 4.0,
                },
            );
            st.series.insert(
                ("ns".into(), "mv-0".into(), String::new()),
                Counters {
                    read: 3.0,
                    ack: 0.0,
                },
            );
        }
        let text = standin.exposition();
        for line in [
            "forwarder_read_total{namespace=\"ns\",pipeline=\"pr-1\",vertex=\"out\"} 5",
            "forwarder_ack_total{namespace=\"ns\",pipeline=\"pr-1\",vertex=\"out\"} 4",
            "monovtx_read_total{namespace=\"ns\",mvtx_name=\"mv-0\"} 3",
            "monovtx_ack_total{namespace=\"ns\",mvtx_name=\"mv-0\"} 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
        }
        assert!(!text.contains("numaflow_"), "{text}");
    }

    #[test]
    fn vertex_and_monovertex_pods_have_series() {
        let v = pod(&[(PIPELINE, "pr-1"), (VERTEX, "out")], true);
        assert_eq!(
            series_of(&v),
            Some(("ns".into(), "pr-1".into(), "out".into()))
        );
        assert!(is_ready(&v));
        let mv = pod(
            &[
                (MONO_VERTEX, "mv-0"),
                ("app.kubernetes.io/component", "mono-vertex"),
            ],
            false,
        );
        assert_eq!(
            series_of(&mv),
            Some(("ns".into(), "mv-0".into(), String::new()))
        );
        assert!(!is_ready(&mv));
        let daemon = pod(
            &[
                (MONO_VERTEX, "mv-0"),
                ("app.kubernetes.io/component", "mono-vertex-daemon"),
            ],
            true,
        );
        assert_eq!(series_of(&daemon), None);
    }

    #[test]
    fn pods_on_the_real_node_are_left_to_their_own_metrics() {
        let mut p = pod(&[(PIPELINE, "pr-1"), (VERTEX, "out")], true);
        assert!(!on_real_node(&p));
        p.spec = Some(
            serde_json::from_value(serde_json::json!({
                "nodeName": crate::realnode::NODE_NAME, "containers": []
            }))
            .expect("spec"),
        );
        assert!(on_real_node(&p));
    }
}
