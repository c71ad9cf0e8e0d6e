//! How a rollout reads its promoted child's status into `ChildResourcesHealthy` and the
//! `*PausingOrPaused` conditions (docs/compatibility.md, CONTRIBUTING.md). Rules are evaluated in
//! order, first match wins; reasons and messages are the reference's, typo included.

use crate::child::{ChildCondition, ChildView};
use crate::json::i64_at;
use numaplane_api::keys::{message, reason};
use serde_json::Value;

/// A condition status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HealthStatus {
    True,
    False,
    Unknown,
}

impl HealthStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            HealthStatus::True => "True",
            HealthStatus::False => "False",
            HealthStatus::Unknown => "Unknown",
        }
    }

    /// `True` for `true`, `False` for `false`.
    pub fn from_bool(b: bool) -> Self {
        if b {
            HealthStatus::True
        } else {
            HealthStatus::False
        }
    }
}

impl AsRef<str> for HealthStatus {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

/// A condition's status, reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    pub status: HealthStatus,
    pub reason: &'static str,
    pub message: String,
}

impl Health {
    fn new(status: HealthStatus, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            reason,
            message: message.into(),
        }
    }

    fn healthy() -> Self {
        Self::new(HealthStatus::True, reason::SUCCESSFUL, message::SUCCESSFUL)
    }

    pub fn is_healthy(&self) -> bool {
        self.status == HealthStatus::True
    }
}

/// Numaflow phases.
const PHASE_FAILED: &str = "Failed";
const PHASE_PAUSED: &str = "Paused";
const PHASE_PAUSING: &str = "Pausing";
const PHASE_DELETING: &str = "Deleting";
const PHASE_PENDING: &str = "Pending";

const STATUS_TRUE: &str = "True";
const STATUS_FALSE: &str = "False";
const STATUS_UNKNOWN: &str = "Unknown";

/// The first condition, in list order, of the given types that is not True. Its status and
/// reason drive the rules below; "all True" reads as status True, reason "".
fn first_unhealthy<'a>(child: &ChildView<'a>, types: &[&str]) -> Option<ChildCondition<'a>> {
    child
        .conditions()
        .into_iter()
        .find(|c| types.contains(&c.type_) && c.status != STATUS_TRUE)
}

fn is_status(c: &Option<ChildCondition<'_>>, status: &str) -> bool {
    c.as_ref().is_some_and(|c| c.status == status)
}

fn has_reason(c: &Option<ChildCondition<'_>>, r: &str) -> bool {
    c.as_ref().is_some_and(|c| c.reason == r)
}

/// `what`, followed by Numaflow's `status.message` when it has one. The reference stopped at the
/// phase ("Pipeline Phase=Failed") and left users to find the cause in the child; the prefix is
/// kept, so alerts matching it still match.
fn explained(what: &str, child: &ChildView<'_>) -> String {
    match child.message().trim() {
        "" => what.to_string(),
        why => format!("{what}: {why}"),
    }
}

/// Whether a child is unhealthy only for Numaflow's own moment of catching up, which its next
/// pass clears (both seen with the real 1.8.1 controller):
/// - a resource it has just created or updated, missing from its own cache: "StatefulSet not
///   found, might be still under creation" (a new ISB service), "Deployment not found, might be
///   still under creation" (a pipeline's daemon after a spec update);
/// - an update of its own Vertex refused for a stale resourceVersion ("the object has been
///   modified; please apply your changes to the latest version", `ReconcileFixedResourcesFailed`,
///   phase Failed for that pass), retried at once.
pub fn numaflow_catching_up(child: &Value) -> bool {
    const PASSING: [&str; 2] = [
        "might be still under creation",
        "the object has been modified; please apply your changes to the latest version",
    ];
    ChildView(child)
        .conditions()
        .iter()
        .any(|c| c.status == STATUS_FALSE && PASSING.iter().any(|p| c.message.contains(p)))
}

/// `ChildResourcesHealthy` of a PipelineRollout, from its promoted Pipeline.
pub fn pipeline_health(child: &Value) -> Health {
    use HealthStatus::*;
    let c = ChildView(child);
    let cond = first_unhealthy(
        &c,
        &[
            "VerticesHealthy",
            "SideInputsManagersHealthy",
            "DaemonServiceHealthy",
        ],
    );
    let phase = c.phase();
    if has_reason(&cond, reason::PROGRESSING) || c.generation_pending() {
        Health::new(False, reason::PROGRESSING, "Pipeline Progressing")
    } else if phase == PHASE_FAILED {
        Health::new(
            False,
            reason::PIPELINE_FAILED,
            explained("Pipeline Phase=Failed", &c),
        )
    } else if is_status(&cond, STATUS_FALSE) {
        Health::new(
            False,
            reason::PIPELINE_FAILED,
            explained("Pipeline Failed, Pipeline Child Resource(s) Unhealthy", &c),
        )
    } else if phase == PHASE_PAUSED || phase == PHASE_PAUSING {
        Health::new(
            Unknown,
            reason::PIPELINE_UNKNOWN,
            "Pipeline Pausing - health unknown",
        )
    } else if phase == PHASE_DELETING {
        Health::new(False, reason::PIPELINE_DELETING, "Pipeline Deleting")
    } else if phase.is_empty() || is_status(&cond, STATUS_UNKNOWN) {
        Health::new(Unknown, reason::PIPELINE_UNKNOWN, "Pipeline Phase Unknown")
    } else {
        Health::healthy()
    }
}

/// `ChildResourcesHealthy` of a MonoVertexRollout, from its promoted MonoVertex.
pub fn monovertex_health(child: &Value) -> Health {
    use HealthStatus::*;
    let c = ChildView(child);
    let cond = first_unhealthy(&c, &["DaemonHealthy", "PodsHealthy"]);
    let phase = c.phase();
    if has_reason(&cond, reason::PROGRESSING) {
        Health::new(False, reason::PROGRESSING, "MonoVertex Progressing")
    } else if phase == PHASE_FAILED || is_status(&cond, STATUS_FALSE) {
        Health::new(
            False,
            reason::MONO_VERTEX_FAILED,
            explained("MonoVertex Failed", &c),
        )
    } else if phase == PHASE_PAUSED {
        Health::new(
            Unknown,
            reason::MONO_VERTEX_UNKNOWN,
            "MonoVertex Pausing - health unknown",
        )
    } else if phase.is_empty() || is_status(&cond, STATUS_UNKNOWN) {
        // The reference's misspelt reason; dashboards and Argo CD health scripts may match it.
        Health::new(
            Unknown,
            reason::MONO_VERTEX_UNKOWN,
            "MonoVertex Phase Unknown",
        )
    } else {
        Health::healthy()
    }
}

/// `ChildResourcesHealthy` of an ISBServiceRollout, from its promoted InterStepBufferService and
/// the StatefulSet Numaflow runs it in (`None` when not found).
pub fn isbsvc_health(child: &Value, statefulset: Option<&Value>) -> Health {
    use HealthStatus::*;
    let c = ChildView(child);
    let cond = first_unhealthy(&c, &["ChildrenResourcesHealthy"]);
    let phase = c.phase();
    if has_reason(&cond, reason::PROGRESSING) {
        Health::new(False, reason::PROGRESSING, "ISBService Progressing")
    } else if phase == PHASE_FAILED || is_status(&cond, STATUS_FALSE) {
        Health::new(
            False,
            reason::ISBSVC_FAILED,
            explained("ISBService Failed", &c),
        )
    } else if phase == PHASE_PENDING || is_status(&cond, STATUS_UNKNOWN) {
        Health::new(False, reason::ISBSVC_PENDING, "ISBService Pending")
    } else if phase.is_empty() {
        Health::new(Unknown, reason::ISBSVC_UNKNOWN, "ISBService Phase Unknown")
    } else {
        match isbsvc_reconciled(child, statefulset) {
            Ok(()) => Health::healthy(),
            Err(why) => Health::new(False, reason::PROGRESSING, why),
        }
    }
}

/// Whether Numaflow has fully rolled out the isbsvc's current spec: the isbsvc observed its
/// generation, its StatefulSet exists and observed its own generation, and every replica is
/// updated. `Err` says what is still pending.
pub fn isbsvc_reconciled(child: &Value, statefulset: Option<&Value>) -> Result<(), String> {
    let c = ChildView(child);
    if c.generation_pending() {
        return Err(format!(
            "Mismatch between ISBService Generation and ObservedGeneration ({} != {})",
            c.generation(),
            c.observed_generation()
        ));
    }
    let Some(sts) = statefulset else {
        return Err(format!("StatefulSet of ISBService {} not found", c.name()));
    };
    let generation = i64_at(sts, &["metadata", "generation"]).unwrap_or(0);
    let observed = i64_at(sts, &["status", "observedGeneration"]).unwrap_or(0);
    if generation != observed {
        return Err(format!(
            "Mismatch between StatefulSet Generation and ObservedGeneration ({generation} != {observed})"
        ));
    }
    let wanted = i64_at(sts, &["spec", "replicas"]).unwrap_or(1);
    let updated = i64_at(sts, &["status", "updatedReplicas"]).unwrap_or(0);
    if updated != wanted {
        return Err(format!(
            "StatefulSet UpdatedReplicas ({updated}) != specified replicas ({wanted})"
        ));
    }
    Ok(())
}

/// `PipelinePausingOrPaused`: (is pausing or paused, reason, message).
pub fn pipeline_pausing_or_paused(child: &Value) -> (bool, &'static str, &'static str) {
    match ChildView(child).phase() {
        PHASE_PAUSING => (true, reason::PIPELINE_PAUSING, message::PIPELINE_PAUSING),
        PHASE_PAUSED => (true, reason::PIPELINE_PAUSED, message::PIPELINE_PAUSED),
        _ => (false, reason::UNPAUSED, message::PIPELINE_UNPAUSED),
    }
}

/// `MonoVertexPausingOrPaused`: (is paused, reason, message). A MonoVertex pauses at once, so
/// there is no "pausing" state.
pub fn monovertex_paused(child: &Value) -> (bool, &'static str, &'static str) {
    if ChildView(child).phase() == PHASE_PAUSED {
        (
            true,
            reason::MONO_VERTEX_PAUSED,
            message::MONO_VERTEX_PAUSED,
        )
    } else {
        (false, reason::UNPAUSED, message::MONO_VERTEX_UNPAUSED)
    }
}

/// The pause tuples above as a [`Health`], ready for [`crate::conditions::set_condition`].
pub fn pause_condition((paused, reason, message): (bool, &'static str, &'static str)) -> Health {
    Health::new(HealthStatus::from_bool(paused), reason, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cond(t: &str, s: &str, r: &str) -> Value {
        json!({"type": t, "status": s, "reason": r, "message": "x"})
    }

    fn child(phase: &str, generation: i64, observed: i64, conds: Vec<Value>) -> Value {
        json!({
            "metadata": {"name": "c-0", "generation": generation},
            "status": {"phase": phase, "observedGeneration": observed, "conditions": conds}
        })
    }

    fn all_true_pipeline() -> Vec<Value> {
        vec![
            cond("Configured", "True", "Successful"),
            cond("DaemonServiceHealthy", "True", "Successful"),
            cond("SideInputsManagersHealthy", "True", "NoSideInputs"),
            cond("VerticesHealthy", "True", "Successful"),
        ]
    }

    fn triple(h: Health) -> (HealthStatus, &'static str, String) {
        (h.status, h.reason, h.message)
    }

    #[test]
    fn pipeline_running_and_healthy() {
        let h = pipeline_health(&child("Running", 2, 2, all_true_pipeline()));
        assert_eq!(
            triple(h),
            (HealthStatus::True, "Successful", "Successful".into())
        );
    }

    #[test]
    fn failures_carry_numaflow_s_message() {
        let mut failed = child("Failed", 1, 1, all_true_pipeline());
        failed["status"]["message"] =
            json!("edge \"cat\" -> \"nowhere\": vertex \"nowhere\" does not exist");
        let h = pipeline_health(&failed);
        assert_eq!(h.reason, "PipelineFailed");
        assert_eq!(
            h.message,
            "Pipeline Phase=Failed: edge \"cat\" -> \"nowhere\": vertex \"nowhere\" does not exist"
        );
        let mut degraded = child(
            "Running",
            1,
            1,
            vec![cond("VerticesHealthy", "False", "Unavailable")],
        );
        degraded["status"]["message"] = json!("Degraded: Vertex \"cat\" is not healthy");
        assert_eq!(
            pipeline_health(&degraded).message,
            "Pipeline Failed, Pipeline Child Resource(s) Unhealthy: Degraded: Vertex \"cat\" is not healthy"
        );
        let mut mv = child("Failed", 1, 1, vec![]);
        mv["status"]["message"] = json!("bad sink");
        assert_eq!(
            monovertex_health(&mv).message,
            "MonoVertex Failed: bad sink"
        );
        let mut isb = child("Failed", 1, 1, vec![]);
        isb["status"]["message"] = json!("no such version");
        assert_eq!(
            isbsvc_health(&isb, None).message,
            "ISBService Failed: no such version"
        );
    }

    #[test]
    fn pipeline_rules_in_order() {
        use HealthStatus::*;
        let progressing = vec![cond("VerticesHealthy", "False", "Progressing")];
        let unhealthy = vec![cond("DaemonServiceHealthy", "False", "Unavailable")];
        let unknown = vec![cond("VerticesHealthy", "Unknown", "")];
        let cases: Vec<(Value, (HealthStatus, &str, &str))> = vec![
            (
                child("Running", 2, 2, progressing.clone()),
                (False, "Progressing", "Pipeline Progressing"),
            ),
            // Progressing wins over Failed.
            (
                child("Failed", 2, 2, progressing),
                (False, "Progressing", "Pipeline Progressing"),
            ),
            (
                child("Running", 3, 2, all_true_pipeline()),
                (False, "Progressing", "Pipeline Progressing"),
            ),
            (
                child("Failed", 2, 2, all_true_pipeline()),
                (False, "PipelineFailed", "Pipeline Phase=Failed"),
            ),
            (
                child("Running", 2, 2, unhealthy.clone()),
                (
                    False,
                    "PipelineFailed",
                    "Pipeline Failed, Pipeline Child Resource(s) Unhealthy",
                ),
            ),
            // A False condition wins over Paused.
            (
                child("Paused", 2, 2, unhealthy),
                (
                    False,
                    "PipelineFailed",
                    "Pipeline Failed, Pipeline Child Resource(s) Unhealthy",
                ),
            ),
            (
                child("Paused", 2, 2, unknown.clone()),
                (
                    Unknown,
                    "PipelineUnknown",
                    "Pipeline Pausing - health unknown",
                ),
            ),
            (
                child("Pausing", 2, 2, all_true_pipeline()),
                (
                    Unknown,
                    "PipelineUnknown",
                    "Pipeline Pausing - health unknown",
                ),
            ),
            (
                child("Deleting", 2, 2, all_true_pipeline()),
                (False, "PipelineDeleting", "Pipeline Deleting"),
            ),
            (
                child("", 2, 2, all_true_pipeline()),
                (Unknown, "PipelineUnknown", "Pipeline Phase Unknown"),
            ),
            (
                child("Running", 2, 2, unknown),
                (Unknown, "PipelineUnknown", "Pipeline Phase Unknown"),
            ),
        ];
        for (i, (c, (s, r, m))) in cases.into_iter().enumerate() {
            assert_eq!(
                triple(pipeline_health(&c)),
                (s, r, m.to_string()),
                "case {i}"
            );
        }
    }

    #[test]
    fn pipeline_only_the_three_health_conditions_count() {
        // Configured=False is Numaflow's phase-Failed path; on its own it doesn't make a
        // Running pipeline unhealthy under the reference's reading.
        let mut conds = all_true_pipeline();
        conds[0] = cond("Configured", "False", "Progressing");
        assert!(pipeline_health(&child("Running", 1, 1, conds)).is_healthy());
    }

    #[test]
    fn pipeline_first_non_true_condition_decides() {
        // The first non-True of the three is Unknown with reason Progressing: Progressing.
        let conds = vec![
            cond("DaemonServiceHealthy", "Unknown", "Progressing"),
            cond("VerticesHealthy", "False", "Unavailable"),
        ];
        assert_eq!(
            pipeline_health(&child("Running", 1, 1, conds)).reason,
            "Progressing"
        );
        // An Unknown first condition hides a later False one (the reference reads only the first).
        let conds = vec![
            cond("DaemonServiceHealthy", "Unknown", ""),
            cond("VerticesHealthy", "False", "Unavailable"),
        ];
        assert_eq!(
            pipeline_health(&child("Running", 1, 1, conds)).reason,
            "PipelineUnknown"
        );
    }

    #[test]
    fn monovertex_rules_in_order() {
        use HealthStatus::*;
        let ok = || {
            vec![
                cond("DaemonHealthy", "True", "Successful"),
                cond("PodsHealthy", "True", "Successful"),
            ]
        };
        let cases: Vec<(Value, (HealthStatus, &str, &str))> = vec![
            (
                child("Running", 1, 1, ok()),
                (True, "Successful", "Successful"),
            ),
            (
                child(
                    "Running",
                    1,
                    1,
                    vec![cond("PodsHealthy", "False", "Progressing")],
                ),
                (False, "Progressing", "MonoVertex Progressing"),
            ),
            (
                child("Failed", 1, 1, ok()),
                (False, "MonoVertexFailed", "MonoVertex Failed"),
            ),
            (
                child(
                    "Paused",
                    1,
                    1,
                    vec![cond("PodsHealthy", "False", "PodCrashLoopBackOff")],
                ),
                (False, "MonoVertexFailed", "MonoVertex Failed"),
            ),
            (
                child("Paused", 1, 1, ok()),
                (
                    Unknown,
                    "MonoVertexUnknown",
                    "MonoVertex Pausing - health unknown",
                ),
            ),
            (
                child("", 1, 1, ok()),
                (Unknown, "MonoVertexUnkown", "MonoVertex Phase Unknown"),
            ),
            (
                child("Running", 1, 1, vec![cond("DaemonHealthy", "Unknown", "")]),
                (Unknown, "MonoVertexUnkown", "MonoVertex Phase Unknown"),
            ),
        ];
        for (i, (c, (s, r, m))) in cases.into_iter().enumerate() {
            assert_eq!(
                triple(monovertex_health(&c)),
                (s, r, m.to_string()),
                "case {i}"
            );
        }
    }

    fn sts(generation: i64, observed: i64, replicas: Option<i64>, updated: i64) -> Value {
        let mut v = json!({
            "metadata": {"generation": generation},
            "spec": {},
            "status": {"observedGeneration": observed, "updatedReplicas": updated}
        });
        if let Some(r) = replicas {
            v["spec"]["replicas"] = json!(r);
        }
        v
    }

    #[test]
    fn a_child_missing_from_numaflow_s_own_cache_is_not_cached_yet() {
        let pipeline = json!({"status": {"phase": "Running", "conditions": [
            {"type": "Configured", "status": "True", "reason": "Successful", "message": ""},
            {"type": "DaemonServiceHealthy", "status": "False", "reason": "GetDaemonServiceFailed",
             "message": "Deployment not found, might be still under creation"}
        ]}});
        assert!(numaflow_catching_up(&pipeline));
        let degraded = json!({"status": {"phase": "Running", "conditions": [
            {"type": "DaemonServiceHealthy", "status": "False", "reason": "Unavailable",
             "message": "Deployment \"p-daemon\" exceeded its progress deadline"}
        ]}});
        assert!(!numaflow_catching_up(&degraded));
        assert!(!numaflow_catching_up(
            &json!({"status": {"phase": "Running"}})
        ));
        let conflict = json!({"status": {"phase": "Failed", "conditions": [
            {"type": "Deployed", "status": "False", "reason": "ReconcileFixedResourcesFailed",
             "message": "failed to update vertex, err: Operation cannot be fulfilled on \
                 vertices.numaflow.numaproj.io \"p-out\": the object has been modified; please \
                 apply your changes to the latest version and try again"}
        ]}});
        assert!(numaflow_catching_up(&conflict));
    }

    #[test]
    fn isbsvc_rules_in_order() {
        use HealthStatus::*;
        let ok = || vec![cond("ChildrenResourcesHealthy", "True", "Healthy")];
        let good_sts = sts(2, 2, Some(3), 3);
        let cases: Vec<(Value, (HealthStatus, &str, &str))> = vec![
            (
                child("Running", 1, 1, ok()),
                (True, "Successful", "Successful"),
            ),
            (
                child(
                    "Running",
                    1,
                    1,
                    vec![cond("ChildrenResourcesHealthy", "False", "Progressing")],
                ),
                (False, "Progressing", "ISBService Progressing"),
            ),
            (
                child("Failed", 1, 1, ok()),
                (False, "ISBSvcFailed", "ISBService Failed"),
            ),
            (
                child(
                    "Running",
                    1,
                    1,
                    vec![cond("ChildrenResourcesHealthy", "False", "Unavailable")],
                ),
                (False, "ISBSvcFailed", "ISBService Failed"),
            ),
            (
                child("Pending", 1, 1, ok()),
                (False, "ISBSvcPending", "ISBService Pending"),
            ),
            (
                child(
                    "Running",
                    1,
                    1,
                    vec![cond("ChildrenResourcesHealthy", "Unknown", "")],
                ),
                (False, "ISBSvcPending", "ISBService Pending"),
            ),
            (
                child("", 1, 1, ok()),
                (Unknown, "ISBSvcUnknown", "ISBService Phase Unknown"),
            ),
        ];
        for (i, (c, (s, r, m))) in cases.into_iter().enumerate() {
            assert_eq!(
                triple(isbsvc_health(&c, Some(&good_sts))),
                (s, r, m.to_string()),
                "case {i}"
            );
        }
    }

    #[test]
    fn isbsvc_healthy_only_when_fully_rolled_out() {
        let ok = vec![cond("ChildrenResourcesHealthy", "True", "Healthy")];
        let running = child("Running", 2, 2, ok.clone());
        let progressing = |h: Health| {
            assert_eq!((h.status, h.reason), (HealthStatus::False, "Progressing"));
            h.message
        };
        let m = progressing(isbsvc_health(
            &child("Running", 3, 2, ok),
            Some(&sts(1, 1, None, 1)),
        ));
        assert!(
            m.starts_with("Mismatch between ISBService Generation and ObservedGeneration"),
            "{m}"
        );
        let m = progressing(isbsvc_health(&running, None));
        assert_eq!(m, "StatefulSet of ISBService c-0 not found");
        let m = progressing(isbsvc_health(&running, Some(&sts(4, 3, Some(3), 3))));
        assert!(
            m.starts_with("Mismatch between StatefulSet Generation and ObservedGeneration"),
            "{m}"
        );
        let m = progressing(isbsvc_health(&running, Some(&sts(4, 4, Some(3), 2))));
        assert_eq!(
            m,
            "StatefulSet UpdatedReplicas (2) != specified replicas (3)"
        );
        // spec.replicas defaults to 1.
        assert!(isbsvc_health(&running, Some(&sts(4, 4, None, 1))).is_healthy());
        assert_eq!(
            isbsvc_reconciled(&running, Some(&sts(4, 4, None, 1))),
            Ok(())
        );
    }

    #[test]
    fn pause_conditions() {
        let p = |phase| pipeline_pausing_or_paused(&child(phase, 1, 1, vec![]));
        assert_eq!(p("Pausing"), (true, "PipelinePausing", "Pipeline pausing"));
        assert_eq!(p("Paused"), (true, "PipelinePaused", "Pipeline paused"));
        assert_eq!(p("Running"), (false, "Unpaused", "Pipeline unpaused"));
        assert_eq!(p(""), (false, "Unpaused", "Pipeline unpaused"));
        let m = |phase| monovertex_paused(&child(phase, 1, 1, vec![]));
        assert_eq!(m("Paused"), (true, "MonoVertexPaused", "MonoVertex paused"));
        assert_eq!(m("Running"), (false, "Unpaused", "MonoVertex unpaused"));
        let h = pause_condition(p("Paused"));
        assert_eq!(
            triple(h),
            (
                HealthStatus::True,
                "PipelinePaused",
                "Pipeline paused".into()
            )
        );
        assert_eq!(pause_condition(m("Running")).status, HealthStatus::False);
    }
}
