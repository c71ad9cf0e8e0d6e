//! The tree `get` shows: built from raw objects (pure, no API calls), serialised as-is for
//! `-o json|yaml` and drawn by [`crate::render`].

use chrono::{DateTime, Utc};
use numaplane_api::Kind;
use numaplane_api::keys::{condition, labels, reason, upgrade_state};
use serde::Serialize;
use serde_json::Value;

/// Objects fetched for one rollout.
#[derive(Clone, Debug)]
pub struct RolloutObjects {
    pub kind: Kind,
    pub rollout: Value,
    pub children: Vec<ChildObjects>,
}

/// A child and the objects hanging off it.
#[derive(Clone, Debug, Default)]
pub struct ChildObjects {
    pub object: Value,
    /// For Pipelines: their Vertex objects.
    pub vertices: Vec<Value>,
    /// AnalysisRuns owned by this child.
    pub analysis_runs: Vec<Value>,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct Tree {
    pub rollouts: Vec<RolloutNode>,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RolloutNode {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub phase: String,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upgrade_in_progress: Option<String>,
    pub generation: i64,
    pub observed_generation: i64,
    /// Short words for the conditions: Healthy, Unhealthy, Paused, Pausing, PausingPipelines, ...
    pub summary: Vec<String>,
    pub conditions: Vec<ConditionNode>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_data_loss: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trial: Option<TrialNode>,
    /// How the last finished upgrade attempt ended (`status.upgradeHistory`), unless it only
    /// created the child.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_upgrade: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub age: Option<String>,
    pub children: Vec<ChildNode>,
    pub riders: Vec<RiderNode>,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ConditionNode {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
}

/// The progressive upgrade in progress (status.progressiveStatus.upgrading*Status).
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TrialNode {
    pub name: String,
    pub assessment_result: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub basic_assessment_end_time: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub analysis_phase: Option<String>,
    pub failure_reasons: Vec<String>,
    /// It passed and waits for its namespace's Numaflow controller trial.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub held: bool,
    /// A Numaflow controller trial: the workload rollouts it carries, `<kind> <name>: <state>`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub workloads: Vec<String>,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ChildNode {
    pub kind: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upgrade_state: Option<String>,
    /// How its progressive assessment ended (`succeeded`, `failed`, `force-promoted`), if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progressive_result: Option<String>,
    pub phase: String,
    /// Healthy (all conditions True), Unhealthy, or Unknown (no conditions yet).
    pub health: String,
    /// Conditions that are not True, as `Type: reason message`.
    pub unhealthy_conditions: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pods: Option<Pods>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub age: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pause: Option<PauseNode>,
    pub analysis_runs: Vec<AnalysisNode>,
}

#[derive(Serialize, Clone, Copy, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Pods {
    pub ready: i64,
    pub desired: i64,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PauseNode {
    pub desired_phase: String,
    pub phase: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drained_on_pause: Option<bool>,
}

impl PauseNode {
    /// Worth a line of its own: a pause is asked for or under way.
    pub fn is_interesting(&self) -> bool {
        self.desired_phase != "Running"
            || matches!(self.phase.as_str(), "Paused" | "Pausing")
            || self.drained_on_pause.is_some()
    }
}

#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AnalysisNode {
    pub name: String,
    pub phase: String,
    pub metrics: Vec<MetricNode>,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MetricNode {
    pub name: String,
    pub phase: String,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RiderNode {
    pub kind: String,
    pub name: String,
}

/// The string at `ptr`, empty when absent.
pub(crate) fn s(v: &Value, ptr: &str) -> String {
    v.pointer(ptr)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn i(v: &Value, ptr: &str) -> Option<i64> {
    v.pointer(ptr).and_then(Value::as_i64)
}

/// Builds the tree; `now` makes ages deterministic in tests.
pub fn build(objects: &[RolloutObjects], now: DateTime<Utc>) -> Tree {
    Tree {
        rollouts: objects.iter().map(|o| rollout_node(o, now)).collect(),
    }
}

fn conditions(v: &Value) -> Vec<ConditionNode> {
    v.pointer("/status/conditions")
        .and_then(Value::as_array)
        .map(|cs| {
            cs.iter()
                .map(|c| ConditionNode {
                    type_: s(c, "/type"),
                    status: s(c, "/status"),
                    reason: s(c, "/reason"),
                    message: s(c, "/message"),
                })
                .collect()
        })
        .unwrap_or_default()
}

fn summary(kind: Kind, conds: &[ConditionNode]) -> Vec<String> {
    let mut out = Vec::new();
    for c in conds {
        let t = c.type_.as_str();
        if t == condition::CHILD_RESOURCES_HEALTHY {
            out.push(match c.status.as_str() {
                "True" => "Healthy".to_string(),
                "False" => "Unhealthy".to_string(),
                _ => "HealthUnknown".to_string(),
            });
        } else if t == kind.pause_condition() && c.status == "True" {
            out.push(match c.reason.as_str() {
                reason::PIPELINE_PAUSING => "Pausing".to_string(),
                reason::PAUSE => "PausingPipelines".to_string(),
                _ => "Paused".to_string(),
            });
        } else if t == condition::PROGRESSIVE_UPGRADE_SUCCEEDED && c.status == "False" {
            out.push("ProgressiveFailed".to_string());
        }
    }
    out
}

fn trial(v: &Value) -> Option<TrialNode> {
    let progressive = v.pointer("/status/progressiveStatus")?.as_object()?;
    let upgrading = progressive
        .iter()
        .find(|(k, _)| k.starts_with("upgrading"))
        .map(|(_, v)| v)?;
    let name = s(upgrading, "/name");
    if name.is_empty() {
        return None;
    }
    Some(TrialNode {
        name,
        assessment_result: s(upgrading, "/assessmentResult"),
        basic_assessment_end_time: upgrading
            .pointer("/basicAssessmentEndTime")
            .and_then(Value::as_str)
            .map(str::to_string),
        analysis_phase: upgrading
            .pointer("/analysis/phase")
            .and_then(Value::as_str)
            .map(str::to_string),
        failure_reasons: upgrading
            .pointer("/failureReasons")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default(),
        held: upgrading.get("awaitingControllerTrial") == Some(&Value::Bool(true)),
        workloads: upgrading
            .pointer("/workloads")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|w| {
                        let child = match s(w, "/child") {
                            c if c.is_empty() => String::new(),
                            c => format!(" ({c})"),
                        };
                        format!(
                            "{} {}: {}{child}",
                            s(w, "/kind"),
                            s(w, "/rollout"),
                            s(w, "/state")
                        )
                    })
                    .collect()
            })
            .unwrap_or_default(),
    })
}

fn rollout_node(o: &RolloutObjects, now: DateTime<Utc>) -> RolloutNode {
    let v = &o.rollout;
    let conds = conditions(v);
    let upgrade = s(v, "/status/upgradeInProgress");
    let allow_data_loss = (o.kind == Kind::Pipeline).then(|| {
        v.pointer("/metadata/annotations")
            .and_then(|a| a.get(numaplane_api::keys::annotations::ALLOW_DATA_LOSS))
            .and_then(Value::as_str)
            == Some("true")
    });
    let mut children: Vec<ChildNode> = o
        .children
        .iter()
        .map(|c| child_node(o.kind, c, now))
        .collect();
    children.sort_by(|a, b| {
        state_rank(a.upgrade_state.as_deref())
            .cmp(&state_rank(b.upgrade_state.as_deref()))
            .then_with(|| a.name.cmp(&b.name))
    });
    // The record outlives the upgrade: once it is over, it is shown only while its child is
    // still the trial (a failed one stays there until the next spec).
    let trial = trial(v).filter(|t| {
        upgrade == "Progressive"
            || children.iter().any(|c| {
                c.name == t.name
                    && matches!(
                        c.upgrade_state.as_deref(),
                        Some(upgrade_state::TRIAL | upgrade_state::IN_PROGRESS)
                    )
            })
    });
    RolloutNode {
        kind: o.kind.rollout_kind().to_string(),
        namespace: s(v, "/metadata/namespace"),
        name: s(v, "/metadata/name"),
        phase: s(v, "/status/phase"),
        message: s(v, "/status/message"),
        upgrade_in_progress: (!upgrade.is_empty()).then_some(upgrade),
        generation: i(v, "/metadata/generation").unwrap_or_default(),
        observed_generation: i(v, "/status/observedGeneration").unwrap_or_default(),
        summary: summary(o.kind, &conds),
        conditions: conds,
        allow_data_loss,
        trial,
        last_upgrade: last_upgrade(v, now),
        age: age(v, now),
        children,
        riders: v
            .pointer("/status/riders")
            .and_then(Value::as_array)
            .map(|rs| {
                rs.iter()
                    .map(|r| RiderNode {
                        kind: s(r, "/groupVersionKind/kind"),
                        name: s(r, "/name"),
                    })
                    .collect()
            })
            .unwrap_or_default(),
    }
}

/// `Failed: trial p-1 (Progressive), 3m ago` for the newest attempt, once it has ended.
fn last_upgrade(v: &Value, now: DateTime<Utc>) -> Option<String> {
    let last = v.pointer("/status/upgradeHistory")?.as_array()?.last()?;
    let outcome = last.get("outcome")?.as_str()?;
    if outcome == "Created" {
        return None;
    }
    let ended = last
        .get("endTime")
        .and_then(Value::as_str)
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| {
            let secs = (now - t.with_timezone(&Utc)).num_seconds().max(0);
            format!(", {} ago", human_duration(secs))
        })
        .unwrap_or_default();
    Some(format!(
        "{outcome}: {} ({}){ended}",
        s(last, "/child"),
        s(last, "/strategy")
    ))
}

fn state_rank(state: Option<&str>) -> u8 {
    match state {
        Some(upgrade_state::PROMOTED) => 0,
        Some(upgrade_state::TRIAL | upgrade_state::IN_PROGRESS) => 1,
        Some(upgrade_state::RECYCLABLE) => 2,
        Some(upgrade_state::RECYCLABLE_EXPIRED) => 3,
        _ => 4,
    }
}

fn child_node(kind: Kind, c: &ChildObjects, now: DateTime<Utc>) -> ChildNode {
    let v = &c.object;
    let conds = conditions(v);
    let unhealthy: Vec<String> = conds
        .iter()
        .filter(|c| c.status != "True")
        .map(|c| {
            let mut line = format!("{}={}", c.type_, c.status);
            if !c.reason.is_empty() {
                line.push_str(&format!(" ({})", c.reason));
            }
            if !c.message.is_empty() {
                line.push_str(&format!(": {}", c.message));
            }
            line
        })
        .collect();
    let health = if conds.is_empty() {
        "Unknown"
    } else if unhealthy.is_empty() {
        "Healthy"
    } else {
        "Unhealthy"
    };
    let pods = match kind {
        Kind::Pipeline if !c.vertices.is_empty() => Some(c.vertices.iter().fold(
            Pods {
                ready: 0,
                desired: 0,
            },
            |acc, vx| Pods {
                ready: acc.ready + i(vx, "/status/readyReplicas").unwrap_or_default(),
                desired: acc.desired + i(vx, "/status/desiredReplicas").unwrap_or_default(),
            },
        )),
        Kind::MonoVertex => {
            let ready = i(v, "/status/readyReplicas");
            let desired = i(v, "/status/desiredReplicas");
            (ready.is_some() || desired.is_some()).then(|| Pods {
                ready: ready.unwrap_or_default(),
                desired: desired.unwrap_or_default(),
            })
        }
        _ => None,
    };
    let pause = matches!(kind, Kind::Pipeline | Kind::MonoVertex).then(|| {
        let desired = s(v, "/spec/lifecycle/desiredPhase");
        PauseNode {
            desired_phase: if desired.is_empty() {
                "Running".to_string()
            } else {
                desired
            },
            phase: s(v, "/status/phase"),
            drained_on_pause: v.pointer("/status/drainedOnPause").and_then(Value::as_bool),
        }
    });
    let mut analysis_runs: Vec<AnalysisNode> = c
        .analysis_runs
        .iter()
        .map(|ar| AnalysisNode {
            name: s(ar, "/metadata/name"),
            phase: s(ar, "/status/phase"),
            metrics: ar
                .pointer("/status/metricResults")
                .and_then(Value::as_array)
                .map(|ms| {
                    ms.iter()
                        .map(|m| MetricNode {
                            name: s(m, "/name"),
                            phase: s(m, "/phase"),
                        })
                        .collect()
                })
                .unwrap_or_default(),
        })
        .collect();
    analysis_runs.sort_by(|a, b| a.name.cmp(&b.name));
    let label = |key: &str| {
        v.pointer("/metadata/labels")
            .and_then(|l| l.get(key))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    ChildNode {
        kind: kind.child_kind().to_string(),
        name: s(v, "/metadata/name"),
        upgrade_state: label(labels::UPGRADE_STATE),
        progressive_result: label(labels::PROGRESSIVE_RESULT_STATE),
        phase: s(v, "/status/phase"),
        health: health.to_string(),
        unhealthy_conditions: unhealthy,
        pods,
        age: age(v, now),
        pause,
        analysis_runs,
    }
}

fn age(v: &Value, now: DateTime<Utc>) -> Option<String> {
    let created = v.pointer("/metadata/creationTimestamp")?.as_str()?;
    let created = DateTime::parse_from_rfc3339(created).ok()?;
    let secs = (now - created.with_timezone(&Utc)).num_seconds().max(0);
    Some(human_duration(secs))
}

/// Ages the way kubectl prints them (`45s`, `3m10s`, `2h5m`, `3d4h`, `12d`).
pub fn human_duration(secs: i64) -> String {
    let (m, h, d) = (secs / 60, secs / 3600, secs / 86400);
    if secs < 120 {
        format!("{secs}s")
    } else if m < 10 {
        let rest = secs % 60;
        if rest == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{rest}s")
        }
    } else if h < 3 {
        format!("{m}m")
    } else if h < 8 {
        let rest = m % 60;
        if rest == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{rest}m")
        }
    } else if d < 2 {
        format!("{h}h")
    } else if d < 8 {
        let rest = h % 24;
        if rest == 0 {
            format!("{d}d")
        } else {
            format!("{d}d{rest}h")
        }
    } else {
        format!("{d}d")
    }
}

#[cfg(test)]
pub mod fixture {
    //! A PipelineRollout in the middle of a progressive upgrade, and a paused MonoVertexRollout.
    use super::*;
    use serde_json::json;

    pub fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-01-01T12:10:00Z")
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_default()
    }

    pub fn objects() -> Vec<RolloutObjects> {
        let pr = json!({
            "metadata": {"name": "my-pipeline", "namespace": "demo", "generation": 3,
                          "creationTimestamp": "2026-01-01T12:00:00Z",
                          "annotations": {"numaplane.numaproj.io/allow-data-loss": "true"}},
            "spec": {"pipeline": {"spec": {}}},
            "status": {
                "phase": "Pending", "message": "Progressing", "observedGeneration": 3,
                "upgradeInProgress": "Progressive",
                "conditions": [
                    {"type": "ChildResourceDeployed", "status": "True", "reason": "Successful", "message": "Successful"},
                    {"type": "ChildResourcesHealthy", "status": "False", "reason": "Progressing", "message": "Pipeline Progressing"},
                    {"type": "PipelinePausingOrPaused", "status": "False", "reason": "Unpaused", "message": "Pipeline unpaused"}
                ],
                "riders": [{"groupVersionKind": {"group": "", "version": "v1", "kind": "ConfigMap"}, "name": "my-cm-my-pipeline-1"}],
                "progressiveStatus": {"upgradingPipelineStatus": {
                    "name": "my-pipeline-1", "assessmentResult": "Unknown",
                    "basicAssessmentEndTime": "2026-01-01T12:12:00Z",
                    "analysis": {"analysisRunName": "my-pipeline-1", "phase": "Running"}
                }}
            }
        });
        let promoted = ChildObjects {
            object: json!({
                "metadata": {"name": "my-pipeline-0", "creationTimestamp": "2026-01-01T12:00:30Z",
                             "labels": {"numaplane.numaproj.io/upgrade-state": "promoted"}},
                "spec": {"lifecycle": {"desiredPhase": "Running"}},
                "status": {"phase": "Running", "conditions": [
                    {"type": "DaemonServiceHealthy", "status": "True"},
                    {"type": "VerticesHealthy", "status": "True"}
                ]}
            }),
            vertices: vec![
                json!({"status": {"readyReplicas": 1, "desiredReplicas": 1}}),
                json!({"status": {"readyReplicas": 2, "desiredReplicas": 2}}),
            ],
            analysis_runs: vec![],
        };
        let trial = ChildObjects {
            object: json!({
                "metadata": {"name": "my-pipeline-1", "creationTimestamp": "2026-01-01T12:08:00Z",
                             "labels": {"numaplane.numaproj.io/upgrade-state": "trial"}},
                "spec": {},
                "status": {"phase": "Running", "conditions": [
                    {"type": "DaemonServiceHealthy", "status": "True"},
                    {"type": "VerticesHealthy", "status": "False", "reason": "Progressing", "message": "1 vertex not ready"}
                ]}
            }),
            vertices: vec![
                json!({"status": {"readyReplicas": 1, "desiredReplicas": 1}}),
                json!({"status": {"readyReplicas": 0, "desiredReplicas": 1}}),
            ],
            analysis_runs: vec![json!({
                "metadata": {"name": "my-pipeline-1"},
                "status": {"phase": "Running", "metricResults": [{"name": "success-rate", "phase": "Successful"}]}
            })],
        };
        let mvr = json!({
            "metadata": {"name": "my-mvtx", "namespace": "demo", "generation": 2,
                          "creationTimestamp": "2026-01-01T09:00:00Z"},
            "spec": {"monoVertex": {"spec": {"lifecycle": {"desiredPhase": "Paused"}}}},
            "status": {
                "phase": "Deployed", "message": "Deployed", "observedGeneration": 2,
                "conditions": [
                    {"type": "ChildResourcesHealthy", "status": "Unknown", "reason": "MonoVertexUnknown", "message": ""},
                    {"type": "MonoVertexPausingOrPaused", "status": "True", "reason": "MonoVertexPaused", "message": "MonoVertex paused"}
                ]
            }
        });
        let mv = ChildObjects {
            object: json!({
                "metadata": {"name": "my-mvtx-0", "creationTimestamp": "2026-01-01T09:00:01Z",
                             "labels": {"numaplane.numaproj.io/upgrade-state": "promoted"}},
                "spec": {"lifecycle": {"desiredPhase": "Paused"}},
                "status": {"phase": "Paused", "readyReplicas": 0, "desiredReplicas": 0}
            }),
            ..ChildObjects::default()
        };
        vec![
            RolloutObjects {
                kind: Kind::Pipeline,
                rollout: pr,
                children: vec![trial, promoted],
            },
            RolloutObjects {
                kind: Kind::MonoVertex,
                rollout: mvr,
                children: vec![mv],
            },
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages() {
        assert_eq!(human_duration(45), "45s");
        assert_eq!(human_duration(190), "3m10s");
        assert_eq!(human_duration(3600), "60m");
        assert_eq!(human_duration(4 * 3600 + 300), "4h5m");
        assert_eq!(human_duration(86400 * 3 + 3600), "3d1h");
        assert_eq!(human_duration(86400 * 12), "12d");
    }

    /// The fixture's upgrade, ended: promoted (the old child recycled), or failed (the trial
    /// labelled failed and scaled down, the rollout still in its progressive upgrade).
    fn ended(failed: bool) -> RolloutObjects {
        let mut o = fixture::objects().remove(0);
        let trial = &mut o.children[0].object;
        if failed {
            trial["metadata"]["labels"]["numaplane.numaproj.io/progressive-result-state"] =
                "failed".into();
        } else {
            o.rollout["status"]["upgradeInProgress"] = "".into();
            trial["metadata"]["labels"]["numaplane.numaproj.io/upgrade-state"] = "promoted".into();
            trial["metadata"]["labels"]["numaplane.numaproj.io/progressive-result-state"] =
                "succeeded".into();
            o.children[1].object["metadata"]["labels"]["numaplane.numaproj.io/upgrade-state"] =
                "recyclable".into();
        }
        o
    }

    #[test]
    fn the_trial_line_lasts_while_its_child_is_the_trial_and_children_show_their_result() {
        let during = build(&fixture::objects(), fixture::now());
        assert_eq!(
            during.rollouts[0].trial.as_ref().map(|t| t.name.as_str()),
            Some("my-pipeline-1")
        );
        assert_eq!(during.rollouts[0].children[1].progressive_result, None);

        let promoted = build(&[ended(false)], fixture::now());
        let pr = &promoted.rollouts[0];
        assert_eq!(pr.trial, None, "the promoted trial is no trial any more");
        assert_eq!(pr.children[0].name, "my-pipeline-1");
        assert_eq!(
            pr.children[0].progressive_result.as_deref(),
            Some("succeeded")
        );

        let failed = build(&[ended(true)], fixture::now());
        let pr = &failed.rollouts[0];
        assert!(pr.trial.is_some(), "a failed trial waits for the next spec");
        assert_eq!(pr.children[1].progressive_result.as_deref(), Some("failed"));
        let out = crate::render::render(&failed, crate::render::Style { color: false }, false);
        assert!(
            out.contains("Pipeline/my-pipeline-1  trial  (failed)  Running"),
            "{out}"
        );
    }

    #[test]
    fn the_last_finished_attempt_is_shown_unless_it_only_created_the_child() {
        let mut o = ended(false);
        let created = serde_json::json!({"child": "my-pipeline-0", "strategy": "DirectApply",
            "startTime": "2026-01-01T12:00:00Z", "endTime": "2026-01-01T12:00:00Z",
            "outcome": "Created"});
        o.rollout["status"]["upgradeHistory"] = serde_json::json!([created]);
        let tree = build(std::slice::from_ref(&o), fixture::now());
        assert_eq!(tree.rollouts[0].last_upgrade, None);

        o.rollout["status"]["upgradeHistory"] = serde_json::json!([created, {
            "child": "my-pipeline-1", "strategy": "Progressive",
            "startTime": "2026-01-01T12:05:00Z", "endTime": "2026-01-01T12:09:00Z",
            "outcome": "Promoted"}]);
        let tree = build(&[o], fixture::now());
        assert_eq!(
            tree.rollouts[0].last_upgrade.as_deref(),
            Some("Promoted: my-pipeline-1 (Progressive), 60s ago")
        );
        let out = crate::render::render(&tree, crate::render::Style { color: false }, false);
        assert!(
            out.contains("\n  last upgrade: Promoted: my-pipeline-1 (Progressive), 60s ago\n"),
            "{out}"
        );
    }

    #[test]
    fn builds_children_pods_health_and_pause() {
        let tree = build(&fixture::objects(), fixture::now());
        let pr = &tree.rollouts[0];
        assert_eq!(pr.summary, ["Unhealthy"]);
        assert_eq!(pr.allow_data_loss, Some(true));
        assert_eq!(pr.age.as_deref(), Some("10m"));
        let names: Vec<_> = pr.children.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["my-pipeline-0", "my-pipeline-1"], "promoted first");
        assert_eq!(
            pr.children[0].pods,
            Some(Pods {
                ready: 3,
                desired: 3
            })
        );
        assert_eq!(pr.children[0].health, "Healthy");
        assert_eq!(pr.children[1].health, "Unhealthy");
        assert_eq!(
            pr.children[1].pods,
            Some(Pods {
                ready: 1,
                desired: 2
            })
        );
        let mv = &tree.rollouts[1];
        assert_eq!(mv.summary, ["HealthUnknown", "Paused"]);
        assert_eq!(mv.allow_data_loss, None);
        assert_eq!(mv.children[0].health, "Unknown");
        assert!(
            mv.children[0]
                .pause
                .as_ref()
                .is_some_and(PauseNode::is_interesting)
        );
    }
}
