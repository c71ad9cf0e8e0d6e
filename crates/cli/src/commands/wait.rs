//! `wait`: watch one rollout until it is deployed, healthy or has promoted its trial, fails, or
//! the timeout passes.

use crate::cli::{Goal, WaitArgs};
use crate::cluster::Cluster;
use crate::render::describe_condition;
use crate::tree::ConditionNode;
use anyhow::{Result, bail};
use futures::StreamExt;
use kube::runtime::{WatchStreamExt, watcher};
use numaplane_api::Kind;
use numaplane_api::keys::condition;
use serde_json::Value;

/// Where a rollout stands relative to the goal.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Reached,
    /// Phase Failed: the status message.
    Failed(String),
    /// Not yet: what blocks it.
    Waiting(String),
}

fn text(v: &Value, ptr: &str) -> String {
    v.pointer(ptr)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// Judges a rollout object against the goal.
pub fn evaluate(kind: Kind, rollout: &Value, goal: Goal) -> Verdict {
    let phase = text(rollout, "/status/phase");
    let message = text(rollout, "/status/message");
    if phase == "Failed" {
        return Verdict::Failed(if message.is_empty() {
            "phase Failed".to_string()
        } else {
            format!("phase Failed: {message}")
        });
    }
    let generation = rollout
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or_default();
    let observed = rollout
        .pointer("/status/observedGeneration")
        .and_then(Value::as_i64)
        .unwrap_or_default();
    let conditions: Vec<ConditionNode> = rollout
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| ConditionNode {
            type_: text(c, "/type"),
            status: text(c, "/status"),
            reason: text(c, "/reason"),
            message: text(c, "/message"),
        })
        .collect();
    let healthy = conditions
        .iter()
        .any(|c| c.type_ == condition::CHILD_RESOURCES_HEALTHY && c.status == "True");
    let deployed = phase == "Deployed" && observed == generation;
    if goal == Goal::Promoted && observed == generation {
        match promotion(kind, rollout, &conditions) {
            Promotion::Failed(why) => return Verdict::Failed(why),
            Promotion::Promoted if deployed => return Verdict::Reached,
            Promotion::Promoted | Promotion::Pending => {}
        }
    }
    if deployed && (goal == Goal::Deployed || (goal == Goal::Healthy && healthy)) {
        return Verdict::Reached;
    }
    let mut reasons = vec![if phase.is_empty() {
        "no status yet (is the Numaplane controller running?)".to_string()
    } else if message.is_empty() || message == phase {
        format!("phase {phase}")
    } else {
        format!("phase {phase} ({message})")
    }];
    if observed != generation {
        reasons.push(format!(
            "observedGeneration {observed} != generation {generation}"
        ));
    }
    if goal == Goal::Promoted {
        reasons.push(trial_progress(kind, rollout));
    }
    if goal == Goal::Healthy && !healthy {
        match conditions
            .iter()
            .find(|c| c.type_ == condition::CHILD_RESOURCES_HEALTHY)
        {
            Some(_) => {}
            None => reasons.push(format!(
                "no {} condition",
                condition::CHILD_RESOURCES_HEALTHY
            )),
        }
    }
    reasons.extend(
        conditions
            .iter()
            .filter(|c| c.status != "True")
            .filter(|c| !is_pause_condition(&c.type_))
            .map(describe_condition),
    );
    Verdict::Waiting(reasons.join("; "))
}

/// Where the rollout's progressive upgrade stands.
enum Promotion {
    /// Its last trial was promoted (assessment Success, not discontinued).
    Promoted,
    /// The assessment failed, or the upgrade was discontinued: the message says why.
    Failed(String),
    /// Still assessing, or no progressive upgrade recorded.
    Pending,
}

fn upgrading(kind: Kind, rollout: &Value) -> Option<&Value> {
    let field = kind.upgrading_status_field()?;
    rollout
        .pointer(&format!("/status/progressiveStatus/{field}"))
        .filter(|u| !u.is_null())
}

/// Reads `status.progressiveStatus.upgrading<Child>Status`, the condition
/// ProgressiveUpgradeSucceeded and `status.upgradeInProgress` (docs/strategies.md).
fn promotion(kind: Kind, rollout: &Value, conditions: &[ConditionNode]) -> Promotion {
    let Some(up) = upgrading(kind, rollout) else {
        return Promotion::Pending;
    };
    let trial = text(up, "/name");
    let result = text(up, "/assessmentResult");
    let in_progress = text(rollout, "/status/upgradeInProgress") == "Progressive";
    let cond = conditions
        .iter()
        .find(|c| c.type_ == condition::PROGRESSIVE_UPGRADE_SUCCEEDED);
    if up.get("discontinued").and_then(Value::as_bool) == Some(true) {
        return Promotion::Failed(format!(
            "progressive upgrade discontinued: trial {trial} was not promoted (the rollout went back to the promoted spec)"
        ));
    }
    let failed = result == "Failure" || cond.is_some_and(|c| c.status == "False");
    if failed {
        let reasons: Vec<&str> = up
            .get("failureReasons")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let why = if reasons.is_empty() {
            cond.filter(|c| !c.message.is_empty())
                .map(|c| c.message.clone())
                .unwrap_or_else(|| "assessment result Failure".into())
        } else {
            reasons.join("; ")
        };
        return Promotion::Failed(format!(
            "progressive upgrade failed: trial {trial}: {why} (fix the spec, or force-promote with `kubectl numaplane promote`)"
        ));
    }
    if result == "Success" && !in_progress {
        Promotion::Promoted
    } else {
        Promotion::Pending
    }
}

/// What the trial is doing, for the waiting message.
fn trial_progress(kind: Kind, rollout: &Value) -> String {
    match upgrading(kind, rollout) {
        None => "no progressive upgrade recorded (status.progressiveStatus has no trial)".into(),
        Some(up) => {
            let result = text(up, "/assessmentResult");
            let result = if result.is_empty() {
                "Unknown"
            } else {
                &result
            };
            format!(
                "trial {} assessment {result}{}",
                text(up, "/name"),
                if text(rollout, "/status/upgradeInProgress") == "Progressive" {
                    ", upgrade in progress"
                } else {
                    ""
                }
            )
        }
    }
}

/// False pause conditions mean "not paused": not a blocker.
fn is_pause_condition(t: &str) -> bool {
    matches!(
        t,
        condition::PIPELINE_PAUSING_OR_PAUSED
            | condition::MONO_VERTEX_PAUSING_OR_PAUSED
            | condition::PAUSING_PIPELINES
    )
}

fn goal_word(goal: Goal) -> &'static str {
    match goal {
        Goal::Deployed => "deployed",
        Goal::Healthy => "healthy",
        Goal::Promoted => "promoted",
    }
}

pub async fn run(cluster: &Cluster, args: &WaitArgs) -> Result<i32> {
    let (kind, obj) = cluster.find(&args.rollout, &Kind::ALL, args.kind).await?;
    if args.goal == Goal::Promoted && kind.upgrading_status_field().is_none() {
        bail!(
            "{}s have no progressive upgrade to wait for: use --for deployed or healthy",
            kind.rollout_kind()
        );
    }
    let what = format!("{}/{}", kind.rollout_kind(), args.rollout);
    let mut last = evaluate(kind, &serde_json::to_value(&obj)?, args.goal);
    let deadline = tokio::time::Instant::now() + args.timeout;
    let config = watcher::Config::default().fields(&format!("metadata.name={}", args.rollout));
    let mut events = watcher(cluster.rollouts(kind), config)
        .default_backoff()
        .boxed();
    loop {
        match last {
            Verdict::Reached => {
                println!("{what} is {}", goal_word(args.goal));
                return Ok(super::EXIT_OK);
            }
            Verdict::Failed(msg) => bail!("{what} failed: {msg}"),
            Verdict::Waiting(_) => {}
        }
        let event = match tokio::time::timeout_at(deadline, events.next()).await {
            Err(_) => break,
            Ok(None) => bail!("the watch on {what} ended"),
            Ok(Some(event)) => event,
        };
        match event {
            Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                last = evaluate(kind, &serde_json::to_value(&o)?, args.goal);
            }
            Ok(watcher::Event::Delete(_)) => bail!("{what} was deleted"),
            // Init/InitDone, and errors the backoff retries.
            Ok(_) | Err(_) => {}
        }
    }
    let reason = match last {
        Verdict::Waiting(r) => r,
        _ => String::new(),
    };
    eprintln!(
        "error: timed out after {} waiting for {what} to be {}: {reason}",
        humantime(args.timeout),
        goal_word(args.goal)
    );
    Ok(super::EXIT_TIMEOUT)
}

fn humantime(d: std::time::Duration) -> String {
    let ms = d.as_millis();
    if !ms.is_multiple_of(1000) {
        format!("{ms}ms")
    } else {
        crate::tree::human_duration(d.as_secs() as i64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rollout(phase: &str, generation: i64, observed: i64, healthy: &str) -> Value {
        json!({
            "metadata": {"name": "p", "generation": generation},
            "status": {"phase": phase, "message": if phase == "Pending" { "Progressing" } else { phase },
                       "observedGeneration": observed,
                       "conditions": [
                           {"type": "ChildResourcesHealthy", "status": healthy, "reason": "Progressing", "message": "Pipeline Progressing"},
                           {"type": "PipelinePausingOrPaused", "status": "False", "reason": "Unpaused"}
                       ]}
        })
    }

    #[test]
    fn verdicts() {
        assert_eq!(
            evaluate(
                Kind::Pipeline,
                &rollout("Deployed", 2, 2, "False"),
                Goal::Deployed
            ),
            Verdict::Reached
        );
        assert_eq!(
            evaluate(
                Kind::Pipeline,
                &rollout("Deployed", 2, 2, "False"),
                Goal::Healthy
            ),
            Verdict::Waiting(
                "phase Deployed; ChildResourcesHealthy=False (Progressing): Pipeline Progressing"
                    .into()
            )
        );
        assert_eq!(
            evaluate(
                Kind::Pipeline,
                &rollout("Deployed", 2, 2, "True"),
                Goal::Healthy
            ),
            Verdict::Reached
        );
        assert_eq!(
            evaluate(
                Kind::Pipeline,
                &rollout("Deployed", 3, 2, "True"),
                Goal::Deployed
            ),
            Verdict::Waiting("phase Deployed; observedGeneration 2 != generation 3".into())
        );
        assert_eq!(
            evaluate(
                Kind::Pipeline,
                &rollout("Pending", 1, 1, "True"),
                Goal::Deployed
            ),
            Verdict::Waiting("phase Pending (Progressing)".into())
        );
        let mut failed = rollout("Failed", 1, 1, "False");
        failed["status"]["message"] = json!("invalid Numaflow Pipeline spec: x");
        assert_eq!(
            evaluate(Kind::Pipeline, &failed, Goal::Deployed),
            Verdict::Failed("phase Failed: invalid Numaflow Pipeline spec: x".into())
        );
        assert!(matches!(
            evaluate(Kind::Pipeline, &json!({"metadata": {"generation": 1}}), Goal::Deployed),
            Verdict::Waiting(r) if r.starts_with("no status yet")
        ));
    }

    fn progressive(phase: &str, in_progress: &str, upgrading: Value) -> Value {
        json!({
            "metadata": {"name": "p", "generation": 2},
            "status": {"phase": phase, "message": phase, "observedGeneration": 2,
                       "upgradeInProgress": in_progress,
                       "progressiveStatus": {"upgradingPipelineStatus": upgrading}}
        })
    }

    #[test]
    fn promoted_verdicts() {
        let k = Kind::Pipeline;
        let done = progressive(
            "Deployed",
            "",
            json!({"name": "p-1", "assessmentResult": "Success"}),
        );
        assert_eq!(evaluate(k, &done, Goal::Promoted), Verdict::Reached);
        // The same status under another kind's field is not this kind's trial.
        assert!(matches!(
            evaluate(Kind::MonoVertex, &done, Goal::Promoted),
            Verdict::Waiting(r) if r.contains("no progressive upgrade recorded")
        ));
        let assessing = progressive(
            "Pending",
            "Progressive",
            json!({"name": "p-1", "assessmentResult": "Unknown"}),
        );
        assert_eq!(
            evaluate(k, &assessing, Goal::Promoted),
            Verdict::Waiting(
                "phase Pending; trial p-1 assessment Unknown, upgrade in progress".into()
            )
        );
        let failed = progressive(
            "Pending",
            "Progressive",
            json!({"name": "p-1", "assessmentResult": "Failure",
                   "failureReasons": ["child phase is in Failed state"]}),
        );
        assert_eq!(
            evaluate(k, &failed, Goal::Promoted),
            Verdict::Failed(
                "progressive upgrade failed: trial p-1: child phase is in Failed state \
                 (fix the spec, or force-promote with `kubectl numaplane promote`)"
                    .into()
            )
        );
        let mut stale = failed.clone();
        stale["metadata"]["generation"] = json!(3);
        assert!(
            matches!(evaluate(k, &stale, Goal::Promoted), Verdict::Waiting(_)),
            "a failure of an older generation is not this change's"
        );
        let discontinued = progressive(
            "Deployed",
            "",
            json!({"name": "p-1", "assessmentResult": "Unknown", "discontinued": true}),
        );
        assert!(matches!(
            evaluate(k, &discontinued, Goal::Promoted),
            Verdict::Failed(m) if m.starts_with("progressive upgrade discontinued")
        ));
    }
}
