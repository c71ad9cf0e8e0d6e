//! A rollout's page: its tree (children, pods, pause and drain state, riders), the AnalysisRuns
//! with their measurements, its Events and its upgrade history, read with the user's client.

use super::table::row;
use crate::cluster::Cluster;
use crate::commands::get::children;
use crate::tree::{RolloutNode, RolloutObjects, build, s};
use anyhow::{Context, Result};
use k8s_openapi::api::events::v1::Event;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use numaplane_api::Kind;
use serde::Serialize;
use serde_json::Value;
use std::collections::HashSet;

/// At most this many Events are shown, newest first.
const EVENTS: usize = 40;
/// At most this many measurements per metric, newest last.
const MEASUREMENTS: usize = 10;

#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Detail {
    pub rollout: RolloutNode,
    pub waiting: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    pub analysis_runs: Vec<RunView>,
    pub events: Vec<EventView>,
    /// `status.upgradeHistory`, oldest first.
    pub history: Value,
    /// What could not be read (a forbidden list), so the page says it instead of showing less.
    pub notes: Vec<String>,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RunView {
    pub name: String,
    pub child: String,
    pub phase: String,
    pub message: String,
    pub metrics: Vec<MetricView>,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MetricView {
    pub name: String,
    pub phase: String,
    pub count: i64,
    pub successful: i64,
    pub failed: i64,
    pub measurements: Vec<Measurement>,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Measurement {
    pub phase: String,
    pub value: String,
    pub finished_at: String,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EventView {
    pub time: String,
    #[serde(rename = "type")]
    pub type_: String,
    pub reason: String,
    pub object: String,
    pub note: String,
    pub count: i32,
}

fn n(v: &Value, ptr: &str) -> i64 {
    v.pointer(ptr).and_then(Value::as_i64).unwrap_or_default()
}

/// An AnalysisRun as the page shows it.
pub fn run_view(child: &str, run: &Value) -> RunView {
    let metrics = run
        .pointer("/status/metricResults")
        .and_then(Value::as_array)
        .map(|ms| {
            ms.iter()
                .map(|m| {
                    let all = m
                        .get("measurements")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default();
                    let skip = all.len().saturating_sub(MEASUREMENTS);
                    MetricView {
                        name: s(m, "/name"),
                        phase: s(m, "/phase"),
                        count: n(m, "/count"),
                        successful: n(m, "/successful"),
                        failed: n(m, "/failed"),
                        measurements: all
                            .iter()
                            .skip(skip)
                            .map(|x| Measurement {
                                phase: s(x, "/phase"),
                                value: s(x, "/value"),
                                finished_at: s(x, "/finishedAt"),
                            })
                            .collect(),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    RunView {
        name: s(run, "/metadata/name"),
        child: child.to_string(),
        phase: s(run, "/status/phase"),
        message: s(run, "/status/message"),
        metrics,
    }
}

/// The Events about `names` (the rollout and its children), newest first.
pub fn event_views(events: &[Event], names: &HashSet<String>) -> Vec<EventView> {
    let mut out: Vec<(Option<k8s_openapi::jiff::Timestamp>, EventView)> = events
        .iter()
        .filter_map(|e| {
            let regarding = e.regarding.as_ref()?;
            let name = regarding.name.as_deref()?;
            if !names.contains(name) {
                return None;
            }
            let time = e
                .series
                .as_ref()
                .map(|s| s.last_observed_time.0)
                .or_else(|| e.event_time.as_ref().map(|t| t.0))
                .or_else(|| e.deprecated_last_timestamp.as_ref().map(|t| t.0))
                .or_else(|| e.metadata.creation_timestamp.as_ref().map(|t| t.0));
            let count = e
                .series
                .as_ref()
                .map(|s| s.count)
                .or(e.deprecated_count)
                .unwrap_or(1);
            Some((
                time,
                EventView {
                    time: time.map(|t| t.to_string()).unwrap_or_default(),
                    type_: e.type_.clone().unwrap_or_default(),
                    reason: e.reason.clone().unwrap_or_default(),
                    object: format!("{}/{name}", regarding.kind.as_deref().unwrap_or_default()),
                    note: e.note.clone().unwrap_or_default(),
                    count,
                },
            ))
        })
        .collect();
    out.sort_by_key(|e| std::cmp::Reverse(e.0));
    out.into_iter().take(EVENTS).map(|(_, e)| e).collect()
}

/// Reads everything the page of one rollout shows; `None` when the rollout does not exist.
pub async fn gather(
    client: &Client,
    kind: Kind,
    namespace: &str,
    name: &str,
) -> Result<Option<Detail>> {
    let cluster = Cluster {
        client: client.clone(),
        namespace: namespace.to_string(),
    };
    let Some(obj) = cluster
        .rollouts(kind)
        .get_opt(name)
        .await
        .with_context(|| format!("getting {} {namespace}/{name}", kind.rollout_kind()))?
    else {
        return Ok(None);
    };
    let rollout = serde_json::to_value(&obj)?;
    let kids = children(&cluster, kind, &obj)
        .await
        .with_context(|| format!("listing the children of {} {name}", kind.rollout_kind()))?;
    let mut analysis_runs = Vec::new();
    let mut names: HashSet<String> = [name.to_string()].into();
    for c in &kids {
        let child = s(&c.object, "/metadata/name");
        analysis_runs.extend(c.analysis_runs.iter().map(|r| run_view(&child, r)));
        names.insert(child);
    }
    let mut notes = Vec::new();
    let events_api: Api<Event> = Api::namespaced(client.clone(), namespace);
    let events = match events_api.list(&ListParams::default()).await {
        Ok(list) => event_views(&list.items, &names),
        Err(e) => {
            notes.push(format!("Events cannot be read: {e}"));
            Vec::new()
        }
    };
    let table_row = row(kind, &rollout);
    let history = rollout
        .pointer("/status/upgradeHistory")
        .cloned()
        .unwrap_or_else(|| Value::Array(Vec::new()));
    let tree = build(
        &[RolloutObjects {
            kind,
            rollout,
            children: kids,
        }],
        chrono::Utc::now(),
    );
    let Some(node) = tree.rollouts.into_iter().next() else {
        return Ok(None);
    };
    Ok(Some(Detail {
        rollout: node,
        waiting: table_row.waiting,
        until: table_row.until,
        analysis_runs,
        events,
        history,
        notes,
    }))
}

/// The objects whose changes can change a rollout's page: watched while the page is open.
pub fn watched(client: &Client, kind: Kind, namespace: &str) -> Vec<Api<DynamicObject>> {
    use numaplane_api::numaflow::{AnalysisRun, Vertex};
    let ns = |r: &kube::core::ApiResource| Api::namespaced_with(client.clone(), namespace, r);
    let mut apis = vec![
        ns(&kind.rollout_resource()),
        ns(&kind.child_resource()),
        ns(&kube::core::ApiResource::erase::<Event>(&())),
    ];
    if matches!(kind, Kind::Pipeline | Kind::MonoVertex) {
        apis.push(ns(&kube::core::ApiResource::erase::<AnalysisRun>(&())));
    }
    if kind == Kind::Pipeline {
        apis.push(ns(&kube::core::ApiResource::erase::<Vertex>(&())));
    }
    apis
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn runs_keep_their_last_measurements() {
        let measurements: Vec<Value> = (0..15)
            .map(|i| {
                json!({"phase": "Successful", "value": format!("[{i}]"),
                            "finishedAt": format!("2026-12-01T00:00:{i:02}Z")})
            })
            .collect();
        let run = json!({
            "metadata": {"name": "p-1-analysis"},
            "status": {"phase": "Running", "metricResults": [{
                "name": "error-rate", "phase": "Running", "count": 15, "successful": 15,
                "measurements": measurements
            }]}
        });
        let v = run_view("p-1", &run);
        assert_eq!((v.name.as_str(), v.child.as_str()), ("p-1-analysis", "p-1"));
        let m = &v.metrics[0];
        assert_eq!((m.count, m.successful, m.failed), (15, 15, 0));
        assert_eq!(m.measurements.len(), MEASUREMENTS);
        assert_eq!(m.measurements[0].value, "[5]");
        assert_eq!(m.measurements[9].finished_at, "2026-12-01T00:00:14Z");
    }

    #[test]
    fn events_are_those_about_the_rollout_and_its_children_newest_first() {
        let event = |name: &str, reason: &str, time: &str| -> Event {
            serde_json::from_value(json!({
                "metadata": {"name": format!("{name}.{reason}"), "namespace": "ns"},
                "eventTime": time,
                "reportingController": "numaplane", "reportingInstance": "x", "action": reason,
                "reason": reason, "type": "Normal", "note": format!("{reason} of {name}"),
                "regarding": {"kind": "PipelineRollout", "name": name}
            }))
            .expect("event")
        };
        let events = vec![
            event("p", "Created", "2026-12-01T00:00:01.000000Z"),
            event("other", "Created", "2026-12-01T00:00:02.000000Z"),
            event("p-1", "Promoted", "2026-12-01T00:00:03.000000Z"),
        ];
        let names: HashSet<String> = ["p".to_string(), "p-1".to_string()].into();
        let views = event_views(&events, &names);
        let reasons: Vec<&str> = views.iter().map(|e| e.reason.as_str()).collect();
        assert_eq!(reasons, ["Promoted", "Created"]);
        assert_eq!(views[1].object, "PipelineRollout/p");
        assert_eq!(views[0].count, 1);
    }
}
