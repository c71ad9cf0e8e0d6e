//! Unit tests with the reference's values (docs/strategies.md; CONTRIBUTING.md).

use super::scale::*;
use super::*;
use crate::config::AssessmentSchedule;
use k8s_openapi::jiff::Timestamp;
use numaplane_api::Kind;
use numaplane_api::progressive::{
    AnalysisPhase, AssessmentResult, ForcedSuccessReason, UpgradingChildStatus,
};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

/// RFC 7386 merge patch, to check what the patches do to a child.
pub(super) fn merge(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = json!({});
            }
            if let Some(t) = target.as_object_mut() {
                for (k, v) in p {
                    if v.is_null() {
                        t.remove(k);
                    } else {
                        merge(t.entry(k.clone()).or_insert(Value::Null), v);
                    }
                }
            }
        }
        _ => *target = patch.clone(),
    }
}

fn ts(s: i64) -> Timestamp {
    Timestamp::from_second(s).unwrap()
}

fn sched(d: u64, e: u64, p: u64, i: u64) -> AssessmentSchedule {
    AssessmentSchedule {
        delay: Duration::from_secs(d),
        end: Duration::from_secs(e),
        period: Duration::from_secs(p),
        interval: Duration::from_secs(i),
    }
}

// ---- scale ----

#[test]
fn min_max_json_is_the_reference_serialisation() {
    let j = |v: Value| scale_min_max_json(Some(&v), "spec.scale").unwrap();
    assert_eq!(scale_min_max_json(None, "s").unwrap(), "null");
    assert_eq!(
        j(json!({"min": 1})),
        r#"{"disabled":null,"max":null,"min":1}"#
    );
    assert_eq!(
        j(json!({"max": 5})),
        r#"{"disabled":null,"max":5,"min":null}"#
    );
    assert_eq!(
        j(json!({"min": 3, "max": 7})),
        r#"{"disabled":null,"max":7,"min":3}"#
    );
    assert_eq!(
        j(json!({"min": 4, "max": 5, "zeroReplicaSleepSeconds": 15, "lookbackSeconds": 1})),
        r#"{"disabled":null,"max":5,"min":4}"#
    );
    assert_eq!(
        j(json!({"disabled": true, "zeroReplicaSleepSeconds": 15})),
        r#"{"disabled":true,"max":null,"min":null}"#
    );
    let e = scale_min_max_json(Some(&json!({"min": "one"})), "spec.scale").unwrap_err();
    assert_eq!(e.path, "spec.scale.min");
}

#[test]
fn split_keeps_floor_half_on_promoted() {
    assert_eq!(split(4), (2, 2));
    assert_eq!(split(5), (2, 3));
    assert_eq!(split(1), (0, 1));
    assert_eq!(split(0), (0, 1));
}

fn monovertex_promoted_spec() -> Value {
    json!({"scale": {"min": 4, "max": 5, "zeroReplicaSleepSeconds": 15}, "source": {}})
}

fn pods(entries: &[(&str, i64)]) -> PromotedPods {
    PromotedPods {
        pods: entries.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        hpa: None,
    }
}

#[test]
fn monovertex_scale_values_keep_half_the_pods_and_the_original_scale() {
    let v = promoted_scale_values(
        Kind::MonoVertex,
        "mvr-0",
        &monovertex_promoted_spec(),
        &pods(&[("mvr-0", 4)]),
    )
    .unwrap();
    let sv = &v["mvr-0"];
    assert_eq!(
        sv.original_scale_min_max,
        r#"{"disabled":null,"max":5,"min":4}"#
    );
    assert_eq!((sv.scale_to, sv.initial), (2, 4));
    let status = serde_json::to_value(sv).unwrap();
    assert_eq!(
        status,
        json!({"originalScaleMinMax": "{\"disabled\":null,\"max\":5,\"min\":4}", "scaleTo": 2, "initial": 4})
    );
}

#[test]
fn monovertex_trial_promoted_and_restore() {
    let spec = monovertex_promoted_spec();
    let values =
        promoted_scale_values(Kind::MonoVertex, "mvr-0", &spec, &pods(&[("mvr-0", 4)])).unwrap();
    // Trial: 2 pods, autoscaling off, other scale fields kept.
    let trial = trial_spec(Kind::MonoVertex, &spec, &values);
    assert_eq!(
        trial["scale"],
        json!({"min": 2, "max": 2, "disabled": false, "zeroReplicaSleepSeconds": 15})
    );
    // A rollout scaled to max 0 is left alone (it is force-promoted as no_data_ingestion).
    let zero = json!({"scale": {"min": 0, "max": 0}});
    assert_eq!(trial_spec(Kind::MonoVertex, &zero, &values), zero);

    let mut promoted = json!({"spec": spec.clone()});
    let down = promoted_scale_down_patch(Kind::MonoVertex, &spec, &values).unwrap();
    assert_eq!(
        down,
        json!({"spec": {"scale": {"min": 2, "max": 2, "disabled": false}}})
    );
    merge(&mut promoted, &down);
    assert_eq!(
        promoted_scale_down_patch(Kind::MonoVertex, &promoted["spec"], &values),
        None
    );
    assert!(!has_saved_scale(
        Kind::MonoVertex,
        &promoted["spec"],
        &values
    ));

    let restore = promoted_restore_patch(Kind::MonoVertex, &promoted["spec"], &values)
        .unwrap()
        .unwrap();
    merge(&mut promoted, &restore);
    // The promoted scale deep-equals the original.
    assert_eq!(
        promoted["spec"]["scale"],
        json!({"min": 4, "max": 5, "zeroReplicaSleepSeconds": 15})
    );
    assert!(has_saved_scale(
        Kind::MonoVertex,
        &promoted["spec"],
        &values
    ));

    let mut t = json!({"spec": trial});
    let z = trial_zero_patch(Kind::MonoVertex, &t["spec"]).unwrap();
    merge(&mut t, &z);
    assert_eq!(
        t["spec"]["scale"],
        json!({"min": 0, "max": 0, "disabled": false, "zeroReplicaSleepSeconds": 15})
    );
    assert_eq!(trial_zero_patch(Kind::MonoVertex, &t["spec"]), None);
}

#[test]
fn monovertex_restore_of_absent_scale_and_hpa_disabled() {
    // No scale at all: restoring removes the whole scale.
    let values =
        promoted_scale_values(Kind::MonoVertex, "m-0", &json!({}), &pods(&[("m-0", 3)])).unwrap();
    assert_eq!(values["m-0"].original_scale_min_max, "null");
    let mut p = json!({"spec": {"scale": {"min": 1, "max": 1, "disabled": false}}});
    let patch = promoted_restore_patch(Kind::MonoVertex, &p["spec"], &values)
        .unwrap()
        .unwrap();
    assert_eq!(patch, json!({"spec": {"scale": null}}));
    merge(&mut p, &patch);
    assert_eq!(p, json!({"spec": {}}));

    // An HPA-driven MonoVertex gets disabled=true back, with its HPA (stripped).
    let spec = json!({"scale": {"disabled": true, "zeroReplicaSleepSeconds": 15}});
    let hpa = json!({"metadata": {"name": "hpa-m-0", "uid": "u", "resourceVersion": "7"},
                     "spec": {"minReplicas": 1}, "status": {"currentReplicas": 2}});
    let observed = PromotedPods {
        pods: [("m-0".to_string(), 2)].into(),
        hpa: Some(hpa),
    };
    let values = promoted_scale_values(Kind::MonoVertex, "m-0", &spec, &observed).unwrap();
    assert_eq!(
        values["m-0"].original_hpa_definition,
        Some(json!({"metadata": {"name": "hpa-m-0"}, "spec": {"minReplicas": 1}}))
    );
    let mut p = json!({"spec": spec.clone()});
    merge(
        &mut p,
        &promoted_scale_down_patch(Kind::MonoVertex, &spec, &values).unwrap(),
    );
    assert_eq!(p["spec"]["scale"]["disabled"], json!(false));
    let restore = promoted_restore_patch(Kind::MonoVertex, &p["spec"], &values)
        .unwrap()
        .unwrap();
    merge(&mut p, &restore);
    assert_eq!(p["spec"]["scale"], spec["scale"]);
}

fn three_vertex_pipeline() -> Value {
    json!({"interStepBufferServiceName": "isbr-0", "vertices": [
        {"name": "in", "source": {"generator": {}}, "scale": {"min": 5, "max": 9}},
        {"name": "cat", "udf": {}, "scale": {"min": 1, "max": 1}},
        {"name": "out", "sink": {}, "scale": {"min": 1, "max": 1}},
    ]})
}

#[test]
fn pipeline_split_per_vertex() {
    let spec = three_vertex_pipeline();
    let values = promoted_scale_values(
        Kind::Pipeline,
        "pl-0",
        &spec,
        &pods(&[("in", 5), ("cat", 1), ("out", 1)]),
    )
    .unwrap();
    assert_eq!(
        values["in"].original_scale_min_max,
        r#"{"disabled":null,"max":9,"min":5}"#
    );
    assert_eq!((values["in"].scale_to, values["cat"].scale_to), (2, 0));

    // The new spec adds a vertex "new": it gets 1.
    let mut desired = spec.clone();
    desired["vertices"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "new", "udf": {}}));
    let trial = trial_spec(Kind::Pipeline, &desired, &values);
    let mins: Vec<_> = trial["vertices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["scale"]["min"].clone(), v["scale"]["max"].clone()))
        .collect();
    assert_eq!(
        mins,
        vec![
            (json!(3), json!(3)),
            (json!(1), json!(1)),
            (json!(1), json!(1)),
            (json!(1), json!(1))
        ]
    );
    // Every source at max 0: not rescaled.
    let mut stopped = spec.clone();
    stopped["vertices"][0]["scale"] = json!({"min": 0, "max": 0});
    assert_eq!(trial_spec(Kind::Pipeline, &stopped, &values), stopped);

    let mut promoted = json!({"spec": spec.clone()});
    merge(
        &mut promoted,
        &promoted_scale_down_patch(Kind::Pipeline, &spec, &values).unwrap(),
    );
    assert_eq!(
        promoted["spec"]["vertices"][0]["scale"],
        json!({"min": 2, "max": 2, "disabled": false})
    );
    assert_eq!(
        promoted["spec"]["vertices"][1]["scale"],
        json!({"min": 0, "max": 0, "disabled": false})
    );
    let restore = promoted_restore_patch(Kind::Pipeline, &promoted["spec"], &values)
        .unwrap()
        .unwrap();
    merge(&mut promoted, &restore);
    assert_eq!(promoted["spec"], spec);

    let mut t = json!({"spec": trial});
    let z = trial_zero_patch(Kind::Pipeline, &t["spec"]).unwrap();
    merge(&mut t, &z);
    assert!(
        t["spec"]["vertices"]
            .as_array()
            .unwrap()
            .iter()
            .all(|v| v["scale"]["min"] == json!(0) && v["scale"]["max"] == json!(0))
    );
    assert_eq!(trial_zero_patch(Kind::Pipeline, &t["spec"]), None);
}

#[test]
fn scale_agnostic_comparisons_follow_9_3() {
    let mv = Kind::MonoVertex;
    // Promoted {1,2} vs a rollout with no scale: equal.
    assert_eq!(
        comparable_promoted_spec(mv, &json!({"scale": {"min": 1, "max": 2}, "replicas": 3})),
        comparable_promoted_spec(mv, &json!({}))
    );
    let rec = |def: &str| TrialScaleRecord::MonoVertex {
        min_max: String::new(),
        definition: def.to_string(),
    };
    let trial = json!({"scale": {"min": 5, "max": 5, "disabled": false}});
    let orig = rec(r#"{"min":1,"max":2}"#);
    assert_eq!(
        comparable_trial_spec(mv, &trial, &orig),
        json!({"scale": {"min": 1, "max": 2}})
    );
    assert_ne!(
        comparable_trial_spec(mv, &trial, &orig),
        json!({"scale": {"min": 3, "max": 4}})
    );
    assert_eq!(comparable_trial_spec(mv, &trial, &rec("null")), json!({}));
    let saved = trial_scale_record(mv, &json!({"scale": {"min": 1, "max": 2}})).unwrap();
    assert_eq!(
        saved,
        TrialScaleRecord::MonoVertex {
            min_max: r#"{"disabled":null,"max":2,"min":1}"#.into(),
            definition: r#"{"max":2,"min":1}"#.into()
        }
    );
}

#[test]
fn scale_agnostic_comparisons_treat_null_as_absent() {
    let pl = Kind::Pipeline;
    // The rollout as a Go-generated manifest sends it; the live child as our merge patches leave it.
    let rollout = json!({"vertices": [{"name": "in", "groupBy": null,
                                       "scale": {"min": 1, "lookbackSeconds": null}}],
                         "watermark": null});
    let live = json!({"vertices": [{"name": "in", "scale": {"min": 2, "max": 2}}]});
    assert!(crate::usde::json_eq(
        &comparable_promoted_spec(pl, &rollout),
        &comparable_promoted_spec(pl, &live)
    ));
    let saved = TrialScaleRecord::Pipeline {
        min_max: Vec::new(),
        definitions: vec![r#"{"min":1,"lookbackSeconds":null}"#.into()],
    };
    let trial = json!({"vertices": [{"name": "in", "scale": {"min": 0, "max": 0}}]});
    assert!(crate::usde::json_eq(
        &comparable_trial_spec(pl, &trial, &saved),
        &comparable_trial_spec(pl, &rollout, &TrialScaleRecord::None)
    ));
    assert!(!super::scale::trial_differs(pl, &trial, &rollout, &saved));
    assert!(!super::scale::promoted_differs(pl, &live, &rollout));
    let edited = json!({"vertices": [{"name": "in", "scale": {"min": 1}, "udf": {}}]});
    assert!(super::scale::trial_differs(pl, &trial, &edited, &saved));
    assert!(super::scale::promoted_differs(pl, &live, &edited));
}

// ---- health, skip ----

#[test]
fn health_samples() {
    use super::health::pipeline_type_health;
    let mv = json!({"spec": {}, "status": {"phase": "Running", "readyReplicas": 1, "desiredReplicas": 3,
        "conditions": [{"type": "PodsHealthy", "status": "False", "reason": "Crash", "message": "boom"}]}});
    let TrialHealth::Unhealthy {
        reasons,
        child_status,
    } = pipeline_type_health(&mv, true, &[])
    else {
        panic!("expected unhealthy")
    };
    assert_eq!(
        reasons,
        vec![
            "condition PodsHealthy is False for Reason \"Crash\": boom".to_string(),
            "readyReplicas=1 is less than desiredReplicas=3".to_string()
        ]
    );
    assert_eq!(child_status, Some(mv["status"].clone()));
    let ok = json!({"status": {"phase": "Running"}});
    assert_eq!(pipeline_type_health(&ok, true, &[]), TrialHealth::Healthy);
    let pending = json!({"status": {"phase": "Pending"}});
    assert_eq!(
        pipeline_type_health(&pending, true, &[]),
        TrialHealth::Pending
    );
    let paused =
        json!({"spec": {"lifecycle": {"desiredPhase": "Paused"}}, "status": {"phase": "Pausing"}});
    assert_eq!(
        pipeline_type_health(&paused, false, &[]),
        TrialHealth::Healthy
    );
    let failed = json!({"status": {"phase": "Failed"}});
    assert!(
        matches!(pipeline_type_health(&failed, false, &[json!({"status": {}})]),
        TrialHealth::Unhealthy { reasons, .. } if reasons == vec!["child phase is in Failed state".to_string()])
    );
    // Every vertex is needed only when the pipeline's own status would pass it.
    use super::health::needs_every_vertex;
    assert!(needs_every_vertex(&ok));
    assert!(needs_every_vertex(&paused));
    let progressing = json!({"status": {"phase": "Running", "conditions": [
        {"type": "VerticesHealthy", "status": "False", "reason": "Progressing", "message": "m"}]}});
    for not_passing in [&failed, &progressing, &pending, &json!({})] {
        assert!(!needs_every_vertex(not_passing), "{not_passing}");
    }
}

#[test]
fn skip_rules_per_kind() {
    use super::skip::{SkipInput, skip_reason};
    let s = |kind, spec: Value, force, hpa, label| {
        skip_reason(&SkipInput {
            kind,
            desired_spec: &spec,
            force_promote: force,
            has_hpa_rider: hpa,
            force_promote_label: label,
        })
    };
    use ForcedSuccessReason::*;
    let mv = Kind::MonoVertex;
    assert_eq!(s(mv, json!({}), false, false, false), None);
    assert_eq!(
        s(
            mv,
            json!({"lifecycle": {"desiredPhase": "Paused"}}),
            true,
            false,
            false
        ),
        Some(NoDataIngestion)
    );
    assert_eq!(
        s(mv, json!({"scale": {"max": 0}}), false, false, false),
        Some(NoDataIngestion)
    );
    assert_eq!(
        s(mv, json!({}), true, false, false),
        Some(RolloutConfiguration)
    );
    assert_eq!(s(mv, json!({}), true, false, true), Some(ForcePromote));
    let pl = Kind::Pipeline;
    let stopped = json!({"vertices": [{"name": "in", "source": {}, "scale": {"min": 0, "max": 0}}, {"name": "out"}]});
    assert_eq!(
        s(pl, stopped.clone(), false, false, false),
        Some(NoDataIngestion)
    );
    assert_eq!(
        s(pl, stopped, true, false, false),
        Some(RolloutConfiguration)
    );
    assert_eq!(
        s(pl, three_vertex_pipeline(), false, true, false),
        Some(ProgressiveUnsupported)
    );
    assert_eq!(s(pl, three_vertex_pipeline(), false, false, false), None);
    assert_eq!(
        s(Kind::IsbService, json!({}), true, false, false),
        Some(RolloutConfiguration)
    );
}

// ---- step: a walk through a MonoVertex upgrade ----

struct World {
    kind: Kind,
    now: i64,
    desired: Value,
    differs_from_promoted: bool,
    promoted: Option<(String, Value)>,
    pods: Option<PromotedPods>,
    trial: Option<(String, Value)>,
    trial_differs: bool,
    health: TrialHealth,
    health_watched: bool,
    label_force: bool,
    label_abort: bool,
    label_retry: bool,
    result_label: Option<&'static str>,
    analysis_enabled: bool,
    run: Option<ObservedRun>,
    record: Record,
    schedule: AssessmentSchedule,
    hold: bool,
    /// Other children labelled promoted.
    older: Vec<String>,
    flipped: bool,
}

impl World {
    fn mv() -> Self {
        World {
            kind: Kind::MonoVertex,
            now: 1_000,
            desired: json!({"scale": {"min": 4, "max": 5, "zeroReplicaSleepSeconds": 15}, "image": "new"}),
            differs_from_promoted: true,
            promoted: Some(("mvr-0".into(), monovertex_promoted_spec())),
            pods: None,
            trial: None,
            trial_differs: false,
            health: TrialHealth::Pending,
            health_watched: false,
            label_force: false,
            label_abort: false,
            label_retry: false,
            result_label: None,
            analysis_enabled: false,
            run: None,
            record: Record {
                name_count: Some(1),
                ..Default::default()
            },
            schedule: sched(10, 180, 30, 10),
            hold: false,
            older: Vec::new(),
            flipped: false,
        }
    }

    fn step(&self) -> Plan {
        let trial = self.trial.as_ref().map(|(n, s)| TrialChild {
            name: n,
            spec: s,
            force_promote_label: self.label_force,
            abort_label: self.label_abort,
            retry_label: self.label_retry,
            result_label: self.result_label,
            differs_from_rollout: self.trial_differs,
            health: self.health.clone(),
            health_watched: self.health_watched,
            analysis_run: self.run.clone(),
        });
        let taken: Vec<String> = self
            .promoted
            .iter()
            .map(|(n, _)| n.clone())
            .chain(self.trial.iter().map(|(n, _)| n.clone()))
            .chain(self.older.iter().cloned())
            .collect();
        step(&StepInput {
            kind: self.kind,
            now: ts(self.now),
            rollout_name: "mvr",
            schedule: self.schedule,
            analysis_run_timeout: Duration::from_secs(1200),
            analysis_enabled: self.analysis_enabled,
            force_promote: false,
            has_hpa_rider: false,
            desired_spec: &self.desired,
            differs_from_promoted: self.differs_from_promoted,
            promoted: self.promoted.as_ref().map(|(n, s)| PromotedChild {
                name: n,
                spec: s,
                pods: self.pods.as_ref(),
            }),
            older_promoted: &self.older,
            taken: &taken,
            flipped: self.flipped,
            trial,
            record: &self.record,
            hold: self.hold,
        })
        .unwrap()
    }

    /// Runs a step, persists as the controller would, returns the action.
    fn run(&mut self) -> Plan {
        let p = self.step();
        self.record = p.after.clone().unwrap_or_else(|| p.record.clone());
        p
    }

    fn upgrading(&self) -> &UpgradingChildStatus {
        self.record.upgrading.as_ref().unwrap()
    }
}

/// Drives a MonoVertex upgrade up to an initialised trial `mvr-1` at t=1000.
fn initialised_mv() -> World {
    let mut w = World::mv();
    assert_eq!(w.run().action, Action::ObservePromotedPods);
    w.pods = Some(pods(&[("mvr-0", 4)]));
    assert_eq!(w.run().action, Action::Persist);
    let sv = &w
        .record
        .promoted
        .as_ref()
        .unwrap()
        .scale_values
        .as_ref()
        .unwrap()["mvr-0"];
    assert_eq!(
        (sv.original_scale_min_max.as_str(), sv.scale_to),
        (r#"{"disabled":null,"max":5,"min":4}"#, 2)
    );
    let p = w.run();
    let Action::CreateTrial {
        name,
        promoted_scale_values,
    } = &p.action
    else {
        panic!("{p:?}")
    };
    assert_eq!(name, "mvr-1");
    assert_eq!(w.record.name_count, Some(2));
    assert_eq!(w.upgrading().name, "mvr-1");
    // Restart before the create landed: the same name again, no new index.
    let again = w.run();
    assert_eq!(again.action, p.action);
    assert_eq!(w.record.name_count, Some(2));
    let spec = trial_spec(Kind::MonoVertex, &w.desired, promoted_scale_values);
    w.trial = Some(("mvr-1".into(), spec));
    let p = w.run();
    assert_eq!(
        p.action,
        Action::InitializeTrial {
            trial: "mvr-1".into(),
            promoted: "mvr-0".into(),
            promoted_patch: Some(
                json!({"spec": {"scale": {"min": 2, "max": 2, "disabled": false}}})
            ),
            delete_promoted_hpa: true,
        }
    );
    assert!(w.upgrading().initialization_complete);
    w.promoted = Some((
        "mvr-0".into(),
        json!({"scale": {"min": 2, "max": 2, "disabled": false, "zeroReplicaSleepSeconds": 15}}),
    ));
    w
}

#[test]
fn monovertex_success_with_exact_wakeups() {
    let mut w = initialised_mv();
    // First assessment pass: start = now + delay; wait until strictly after it.
    let p = w.run();
    assert_eq!(
        p.action,
        Action::Wait {
            until: Some(ts(1011))
        }
    );
    assert_eq!(
        w.upgrading()
            .basic_assessment_start_time
            .as_ref()
            .unwrap()
            .0,
        ts(1010)
    );
    // Healthy at 1011: the window starts; wake at the next sample (interval 10).
    w.now = 1011;
    w.health = TrialHealth::Healthy;
    let p = w.run();
    assert_eq!(
        p.action,
        Action::Wait {
            until: Some(ts(1021))
        }
    );
    let counting =
        "trial mvr-1: healthy since 1970-01-01T00:16:51Z, succeeds at 1970-01-01T00:17:21Z";
    assert!(p.message.starts_with(counting), "{}", p.message);
    // A later sample of the same window says the same: sampling writes no status.
    w.now = 1021;
    let again = w.run();
    assert_eq!(again.message, p.message);
    assert_eq!(
        again.action,
        Action::Wait {
            until: Some(ts(1031))
        }
    );
    // At 1041 the 30 s window is complete.
    w.now = 1041;
    w.record.upgrading.as_mut().unwrap().trial_window_start_time = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(ts(1011)),
    );
    let p = w.run();
    assert_eq!(
        p.action,
        Action::Promote {
            trial: "mvr-1".into(),
            previous: vec!["mvr-0".into()],
            result_label: "succeeded"
        }
    );
    assert_eq!(
        w.upgrading().assessment_result,
        Some(AssessmentResult::Success)
    );
    assert_eq!(
        w.upgrading().basic_assessment_result,
        Some(AssessmentResult::Success)
    );
    // The old child's saved scale is dropped only once the labels flipped (`after`).
    assert_eq!(w.record.promoted, None);
    // A restart before the labels flipped promotes again; after the flip it is done.
    assert_eq!(w.run().action, p.action);
    w.promoted = w.trial.take();
    w.differs_from_promoted = false;
    let done = w.run();
    assert_eq!(
        (done.action, done.progress),
        (Action::Done, Progress::Complete)
    );
}

/// A trial judged only from what is watched gets no timed samples: it waits for the deadline
/// that applies (the failure deadline, then the end of its healthy window), and each change
/// of its health arrives as a pass of its own.
#[test]
fn a_watched_trial_waits_only_for_its_deadlines() {
    let mut w = initialised_mv();
    w.health_watched = true;
    // Delay 10 s from 1000: assessment starts after 1010, a plain wait.
    let p = w.run();
    assert_eq!(
        (p.action, p.deadline),
        (
            Action::Wait {
                until: Some(ts(1011))
            },
            false
        )
    );
    // Not running yet: no sample every 10 s, only the failure deadline (end 180 s).
    w.now = 1011;
    let p = w.run();
    assert_eq!(
        (p.action, p.deadline),
        (
            Action::Wait {
                until: Some(ts(1191))
            },
            true
        )
    );
    // Unhealthy: the same.
    w.now = 1020;
    w.health = TrialHealth::Unhealthy {
        reasons: vec!["down".into()],
        child_status: None,
    };
    let p = w.run();
    assert_eq!(
        (p.action, p.deadline),
        (
            Action::Wait {
                until: Some(ts(1191))
            },
            true
        )
    );
    // Healthy from 1030: the 30 s window ends at 1060, the verdict's moment.
    w.now = 1030;
    w.health = TrialHealth::Healthy;
    let p = w.run();
    assert_eq!(
        (p.action, p.deadline),
        (
            Action::Wait {
                until: Some(ts(1060))
            },
            true
        )
    );
    // A window that would end after the deadline is woken at the deadline.
    w.now = 1170;
    w.health = TrialHealth::Unhealthy {
        reasons: vec!["down".into()],
        child_status: None,
    };
    w.run();
    w.health = TrialHealth::Healthy;
    let p = w.run();
    assert_eq!(
        (p.action, p.deadline),
        (
            Action::Wait {
                until: Some(ts(1191))
            },
            true
        )
    );
    w.now = 1191;
    assert!(matches!(w.run().action, Action::Fail { .. }));
    // Not watched (a pipeline whose vertices decide): sampled every interval as before.
    let mut w = initialised_mv();
    w.run();
    w.now = 1011;
    let p = w.run();
    assert_eq!(
        (p.action, p.deadline),
        (
            Action::Wait {
                until: Some(ts(1021))
            },
            false
        )
    );
}

#[test]
fn a_promotion_flipped_before_its_record_is_finished_from_the_labels() {
    let mut w = initialised_mv();
    w.run();
    w.now = 1011;
    w.health = TrialHealth::Healthy;
    w.run();
    w.now = 1041;
    w.record.upgrading.as_mut().unwrap().trial_window_start_time = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(ts(1011)),
    );
    let before = w.record.clone();
    let flip = w.step();
    assert_eq!(
        flip.action,
        Action::Promote {
            trial: "mvr-1".into(),
            previous: vec!["mvr-0".into()],
            result_label: "succeeded"
        }
    );
    // The flip goes out before the record...
    assert!(flip.action.records_itself());
    // ...and the controller stops right after it: the record still says "assessing", the
    // trial is labelled promoted beside the old child.
    w.record = before;
    w.promoted = w.trial.take();
    w.older = vec!["mvr-0".into()];
    w.differs_from_promoted = false;
    w.flipped = true;
    // The same promotion is finished: the old child retired, the success recorded.
    assert_eq!(w.run().action, flip.action);
    assert_eq!(
        w.upgrading().assessment_result,
        Some(AssessmentResult::Success)
    );
    // Once the old child is retired the upgrade completes, its success recorded.
    w.older.clear();
    let done = w.run();
    assert_eq!(
        (done.action, done.progress),
        (Action::Done, Progress::Complete)
    );
    assert_eq!(
        w.upgrading().assessment_result,
        Some(AssessmentResult::Success)
    );
    assert_eq!(w.record.promoted, None);
}

#[test]
fn window_end_is_an_exact_wakeup() {
    let mut w = initialised_mv();
    w.run();
    w.now = 1011;
    w.health = TrialHealth::Healthy;
    w.schedule = sched(10, 180, 5, 10);
    let p = w.run();
    assert_eq!(
        p.action,
        Action::Wait {
            until: Some(ts(1016))
        }
    );
    // The verdict falls due then, so that pass goes before routine ones.
    assert!(p.deadline);
    // A plain sample is no deadline; the last sample before a window end that falls on the
    // next sample is.
    let mut w = initialised_mv();
    w.run();
    w.now = 1011;
    w.health = TrialHealth::Healthy;
    assert!(
        !w.run().deadline,
        "the next sample (1021) comes before the window's end"
    );
    w.now = 1031;
    let p = w.run();
    assert_eq!(
        p.action,
        Action::Wait {
            until: Some(ts(1041))
        }
    );
    assert!(
        p.deadline,
        "the window (30 s from 1011) ends at the next sample, 1041"
    );
}

/// The patches of the first `Fail` of `initialised_mv`'s trial: the promoted MonoVertex back to
/// its saved scale, the trial to zero.
fn fail_patches(p: &Plan) -> (&Value, &Value) {
    let Action::Fail {
        label_failed: true,
        promoted_patch: Some(pp),
        trial_patch: Some(tp),
        ..
    } = &p.action
    else {
        panic!("{p:?}")
    };
    assert_eq!(
        pp,
        &json!({"spec": {"scale": {"disabled": null, "max": 5, "min": 4, "zeroReplicaSleepSeconds": 15}}})
    );
    assert_eq!(
        tp,
        &json!({"spec": {"scale": {"min": 0, "max": 0, "disabled": false}}})
    );
    (pp, tp)
}

#[test]
fn monovertex_failure_restores_and_is_sticky() {
    let mut w = initialised_mv();
    w.run();
    w.health = TrialHealth::Unhealthy {
        reasons: vec!["child phase is in Failed state".into()],
        child_status: Some(json!({"phase": "Failed"})),
    };
    w.now = 1011;
    let p = w.run();
    // Transient: recorded, wait for the next sample.
    assert_eq!(
        p.action,
        Action::Wait {
            until: Some(ts(1021))
        }
    );
    assert_eq!(
        w.upgrading().failure_reasons,
        vec!["child phase is in Failed state".to_string()]
    );
    assert_eq!(w.upgrading().child_status, Some(json!({"phase": "Failed"})));
    // Close to the end the wake-up is the deadline: start 1010 + end 180, strictly after.
    w.now = 1185;
    assert_eq!(
        w.run().action,
        Action::Wait {
            until: Some(ts(1191))
        }
    );
    w.now = 1191;
    let p = w.step();
    assert_eq!(p.progress, Progress::Failed);
    assert_eq!(
        p.record.upgrading.as_ref().unwrap().assessment_result,
        Some(AssessmentResult::Failure)
    );
    let (pp, tp) = fail_patches(&p);
    // The saved scale is kept until the restore is done.
    assert!(p.record.promoted.as_ref().unwrap().scale_values.is_some());
    let after = p.after.clone().unwrap();
    assert_eq!(after.promoted.as_ref().unwrap().scale_values, None);
    assert!(
        after
            .promoted
            .as_ref()
            .unwrap()
            .scale_values_restored_to_original
    );
    w.record = after;
    merge(w.promoted.as_mut().map(|(_, s)| s).unwrap(), &pp["spec"]);
    merge(w.trial.as_mut().map(|(_, s)| s).unwrap(), &tp["spec"]);
    w.result_label = Some("failed");
    // Sticky, even if healthy now; nothing left to do.
    w.health = TrialHealth::Healthy;
    w.now = 2000;
    let p = w.run();
    assert_eq!(
        (p.action, p.progress),
        (Action::Wait { until: None }, Progress::Failed)
    );
    assert!(
        p.message
            .contains("waiting for a spec change or the force-promote label")
    );

    // Force-promote by label rescues it.
    w.label_force = true;
    let p = w.run();
    assert_eq!(
        p.action,
        Action::Promote {
            trial: "mvr-1".into(),
            previous: vec!["mvr-0".into()],
            result_label: "force-promoted"
        }
    );
    assert!(w.upgrading().forced_success);
    assert_eq!(
        w.upgrading().forced_success_reason,
        Some(ForcedSuccessReason::ForcePromote)
    );
}

#[test]
fn an_aborted_trial_fails_at_once_and_stays_failed_unless_force_promoted() {
    let mut w = initialised_mv();
    w.run();
    w.health = TrialHealth::Healthy;
    w.now = 1011;
    assert!(matches!(w.run().action, Action::Wait { .. }));
    // Healthy and half-way through its assessment: the abort label fails it now, exactly as a
    // failed assessment would (promoted child restored, trial scaled to zero).
    w.label_abort = true;
    w.now = 1050;
    let p = w.step();
    assert_eq!(p.progress, Progress::Failed);
    let (pp, tp) = fail_patches(&p);
    let u = p.record.upgrading.as_ref().unwrap();
    assert_eq!(u.assessment_result, Some(AssessmentResult::Failure));
    assert_eq!(u.failure_reasons, vec![super::step::ABORTED.to_string()]);
    assert!(p.message.contains("aborted by the user"), "{}", p.message);
    w.record = p.after.clone().unwrap();
    merge(w.promoted.as_mut().map(|(_, s)| s).unwrap(), &pp["spec"]);
    merge(w.trial.as_mut().map(|(_, s)| s).unwrap(), &tp["spec"]);
    w.result_label = Some("failed");
    // The label removed, the trial healthy, time past the assessment: still failed.
    w.label_abort = false;
    w.now = 3000;
    let p = w.run();
    assert_eq!(
        (p.action, p.progress),
        (Action::Wait { until: None }, Progress::Failed)
    );
    // Force-promote wins over the abort label, as it rescues any failure.
    w.label_abort = true;
    w.label_force = true;
    assert!(matches!(w.run().action, Action::Promote { .. }));
}

#[test]
fn a_retry_replaces_a_failed_trial_and_only_a_failed_one() {
    let mut w = initialised_mv();
    w.run();
    w.health = TrialHealth::Healthy;
    w.now = 1011;
    assert!(matches!(w.run().action, Action::Wait { .. }));
    // Still being assessed: the label changes nothing.
    w.label_retry = true;
    assert!(matches!(w.run().action, Action::Wait { .. }));
    // Aborted, failed: the retry replaces it as a spec change would.
    w.label_retry = false;
    w.label_abort = true;
    let p = w.step();
    assert_eq!(p.progress, Progress::Failed);
    w.record = p.after.clone().unwrap();
    w.result_label = Some("failed");
    w.label_retry = true;
    let p = w.run();
    assert_eq!(
        p.action,
        Action::ReplaceTrial {
            trial: "mvr-1".into(),
            reason: "progressive-replaced-failed"
        }
    );
    assert!(p.message.contains("retry"), "{}", p.message);
    // Force-promote wins over a retry.
    w.label_force = true;
    assert!(matches!(w.run().action, Action::Promote { .. }));
}

#[test]
fn failed_trial_replaced_then_scale_recounted() {
    let mut w = initialised_mv();
    w.record.upgrading.as_mut().unwrap().assessment_result = Some(AssessmentResult::Failure);
    w.record.promoted.as_mut().unwrap().scale_values = None;
    w.record
        .promoted
        .as_mut()
        .unwrap()
        .scale_values_restored_to_original = true;
    w.trial_differs = true;
    assert_eq!(
        w.run().action,
        Action::ReplaceTrial {
            trial: "mvr-1".into(),
            reason: "progressive-replaced-failed"
        }
    );
    w.trial = None;
    w.pods = None;
    // The restored promoted child is counted again before the next trial.
    assert_eq!(w.run().action, Action::ObservePromotedPods);
    w.pods = Some(pods(&[("mvr-0", 5)]));
    assert_eq!(w.run().action, Action::Persist);
    let p = w.run();
    assert!(matches!(&p.action, Action::CreateTrial { name, .. } if name == "mvr-2"));
}

#[test]
fn revert_discontinues_and_missing_promoted_is_recreated() {
    let mut w = initialised_mv();
    w.trial_differs = true;
    w.differs_from_promoted = false;
    let p = w.run();
    assert!(
        matches!(&p.action, Action::Discontinue { trial, promoted_patch: Some(_), recreate_hpa: None } if trial == "mvr-1"),
        "{p:?}"
    );
    assert!(w.upgrading().discontinued);
    // The promoted child got its saved scale back with the discontinue.
    assert!(
        w.record
            .promoted
            .as_ref()
            .unwrap()
            .scale_values_restored_to_original
    );
    w.trial = None;
    w.promoted = Some(("mvr-0".into(), monovertex_promoted_spec()));
    assert_eq!(w.run().action, Action::Done);
    assert_eq!(w.record.promoted, None);

    // A discontinue cut short (promoted still halved, saved scale recorded): restore, then done.
    let mut w = initialised_mv();
    w.trial = None;
    w.differs_from_promoted = false;
    let p = w.run();
    assert!(matches!(p.action, Action::RestorePromoted { .. }), "{p:?}");
    w.promoted = Some(("mvr-0".into(), monovertex_promoted_spec()));
    assert_eq!(w.run().action, Action::Done);

    let mut w = initialised_mv();
    w.promoted = None;
    assert_eq!(w.run().action, Action::RecreatePromoted);
    assert!(w.upgrading().discontinued);
    w.promoted = Some(("mvr-2".into(), w.desired.clone()));
    w.differs_from_promoted = false;
    assert_eq!(
        w.run().action,
        Action::Discontinue {
            trial: "mvr-1".into(),
            promoted_patch: None,
            recreate_hpa: None
        }
    );
}

#[test]
fn a_trial_that_cannot_take_in_data_is_force_promoted() {
    let mut w = initialised_mv();
    w.desired = json!({"scale": {"min": 0, "max": 0}});
    w.run();
    assert_eq!(
        w.upgrading().forced_success_reason,
        Some(ForcedSuccessReason::NoDataIngestion)
    );
    assert!(w.upgrading().forced_success);
    let json = serde_json::to_value(w.upgrading()).unwrap();
    assert_eq!(json["forcedSuccessReason"], json!("no_data_ingestion"));
}

#[test]
fn analysis_run_phases() {
    let healthy = || {
        let mut w = initialised_mv();
        w.schedule = sched(0, 180, 0, 10);
        w.analysis_enabled = true;
        w.health = TrialHealth::Healthy;
        w.run(); // records the start
        w.now += 1;
        w
    };
    let mut w = healthy();
    let p = w.run();
    assert_eq!(
        p.action,
        Action::CreateAnalysisRun {
            name: "monovertex-mvr-1".into(),
            trial: "mvr-1".into()
        }
    );
    let start = w
        .record
        .analysis
        .as_ref()
        .unwrap()
        .start_time
        .clone()
        .unwrap();
    assert_eq!(start.0, ts(1001));
    let obs = |phase| ObservedRun {
        phase,
        completed_at: None,
    };
    w.run = Some(obs(AnalysisPhase::Running));
    // Its finish is watched: looked at again only after 20 s (not every 10 s interval).
    assert_eq!(
        w.run().action,
        Action::Wait {
            until: Some(ts(1021))
        }
    );
    // Close to the timeout the wake-up is the timeout.
    w.now = 1001 + 1195;
    assert_eq!(
        w.run().action,
        Action::Wait {
            until: Some(ts(1001 + 1200))
        }
    );
    w.now = 1001 + 1200;
    assert!(matches!(w.step().action, Action::Fail { .. }));

    for (phase, ok) in [
        (AnalysisPhase::Successful, true),
        (AnalysisPhase::Failed, false),
        (AnalysisPhase::Error, false),
        (AnalysisPhase::Inconclusive, false),
    ] {
        let mut w = healthy();
        w.run();
        w.run = Some(obs(phase));
        let p = w.step();
        assert_eq!(
            matches!(p.action, Action::Promote { .. }),
            ok,
            "{phase:?}: {p:?}"
        );
        assert_eq!(p.record.analysis.as_ref().unwrap().phase, phase);
    }
}

#[test]
fn isbservice_follows_its_pipelines() {
    use super::health::isbsvc_health;
    use numaplane_api::pipeline_rollout::UpgradingPipelineStatus;
    let pl = |isb: &str, r| UpgradingPipelineStatus {
        child: UpgradingChildStatus {
            name: "pl-1".into(),
            assessment_result: Some(r),
            ..Default::default()
        },
        inter_step_buffer_service_name: isb.into(),
        ..Default::default()
    };
    let ok = pl("isbr-1", AssessmentResult::Success);
    let other = pl("isbr-0", AssessmentResult::Success);
    let bad = pl("isbr-1", AssessmentResult::Failure);
    assert_eq!(
        isbsvc_health("isbr-1", &[], None, false),
        TrialHealth::Healthy
    );
    assert_eq!(
        isbsvc_health("isbr-1", &[Some(&ok), Some(&other)], None, false),
        TrialHealth::Pending
    );
    assert_eq!(
        isbsvc_health("isbr-1", &[Some(&ok), None], None, false),
        TrialHealth::Pending
    );
    assert_eq!(
        isbsvc_health("isbr-1", &[Some(&ok), Some(&bad)], None, false),
        TrialHealth::Unhealthy {
            reasons: vec!["Pipeline pl-1 failed".into()],
            child_status: None
        }
    );

    // Shipped schedule 0,0,0,10: End doesn't apply; the promoted status is kept on success.
    let mut w = World::mv();
    w.kind = Kind::IsbService;
    w.schedule = sched(0, 0, 0, 10);
    w.desired = json!({"jetstream": {"version": "2.10.11"}});
    assert!(matches!(w.run().action, Action::CreateTrial { ref name, .. } if name == "mvr-1"));
    w.trial = Some(("mvr-1".into(), w.desired.clone()));
    assert!(matches!(
        w.run().action,
        Action::InitializeTrial {
            promoted_patch: None,
            ..
        }
    ));
    w.run();
    w.now += 100;
    assert_eq!(
        w.run().action,
        Action::Wait {
            until: Some(ts(w.now + 10))
        }
    );
    w.health = TrialHealth::Healthy;
    assert!(matches!(w.run().action, Action::Promote { .. }));
    assert_eq!(w.record.promoted.as_ref().unwrap().name, "mvr-0");
}

#[test]
fn records_round_trip_through_each_status() {
    use numaplane_api::monovertex_rollout::MonoVertexRolloutStatus;
    use numaplane_api::pipeline_rollout::PipelineRolloutStatus;
    let w = initialised_mv();
    let mut s = MonoVertexRolloutStatus::default();
    w.record.write_monovertex(&mut s);
    assert_eq!(Record::from_monovertex(&s), w.record);
    let j = serde_json::to_value(&s).unwrap();
    assert_eq!(
        j["progressiveStatus"]["promotedMonoVertexStatus"]["scaleValues"]["mvr-0"]["originalScaleMinMax"],
        json!(r#"{"disabled":null,"max":5,"min":4}"#)
    );
    assert_eq!(
        j["progressiveStatus"]["upgradingMonoVertexStatus"]["originalScaleMinMax"],
        json!(r#"{"disabled":null,"max":5,"min":4}"#)
    );

    let rec = Record {
        trial_scale: trial_scale_record(Kind::Pipeline, &three_vertex_pipeline()).unwrap(),
        trial_isbsvc: "isbr-0".into(),
        historical_pod_count: Some(BTreeMap::from([("in".to_string(), 5)])),
        upgrading: Some(UpgradingChildStatus {
            name: "pl-1".into(),
            ..Default::default()
        }),
        name_count: Some(2),
        ..Default::default()
    };
    let mut s = PipelineRolloutStatus::default();
    rec.write_pipeline(&mut s);
    assert_eq!(Record::from_pipeline(&s), rec);
}

#[test]
fn pipeline_start_records_history_isbsvc_and_trial_scale() {
    let mut w = World::mv();
    w.kind = Kind::Pipeline;
    w.promoted = Some(("mvr-0".into(), three_vertex_pipeline()));
    let mut desired = three_vertex_pipeline();
    desired["vertices"][1]["udf"] = json!({"container": {"image": "badcat"}});
    desired["interStepBufferServiceName"] = json!("isbr-1");
    w.desired = desired.clone();
    assert_eq!(w.run().action, Action::ObservePromotedPods);
    w.pods = Some(pods(&[("in", 5), ("cat", 1), ("out", 1)]));
    assert_eq!(w.run().action, Action::Persist);
    assert_eq!(
        w.record.historical_pod_count,
        Some(BTreeMap::from([
            ("cat".to_string(), 1),
            ("in".to_string(), 5),
            ("out".to_string(), 1)
        ]))
    );
    let p = w.run();
    let Action::CreateTrial {
        name,
        promoted_scale_values,
    } = &p.action
    else {
        panic!("{p:?}")
    };
    assert_eq!(name, "mvr-1");
    assert_eq!(w.record.trial_isbsvc, "isbr-1");
    let TrialScaleRecord::Pipeline { definitions, .. } = &w.record.trial_scale else {
        panic!("{:?}", w.record.trial_scale)
    };
    assert_eq!(definitions[0], r#"{"max":9,"min":5}"#);
    w.trial = Some((
        "mvr-1".into(),
        trial_spec(Kind::Pipeline, &desired, promoted_scale_values),
    ));
    let p = w.run();
    let Action::InitializeTrial {
        promoted_patch: Some(patch),
        delete_promoted_hpa: false,
        ..
    } = &p.action
    else {
        panic!("{p:?}")
    };
    assert_eq!(
        patch["spec"]["vertices"][0]["scale"],
        json!({"min": 2, "max": 2, "disabled": false})
    );
}

#[test]
fn a_trial_on_a_trial_controller_is_held_then_promoted_when_released() {
    let mut w = initialised_mv();
    w.hold = true;
    w.run();
    w.now = 1011;
    w.health = TrialHealth::Healthy;
    w.run();
    w.now = 1041;
    w.record.upgrading.as_mut().unwrap().trial_window_start_time = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(ts(1011)),
    );
    let held = w.run();
    assert_eq!(
        held.action,
        Action::Wait {
            until: Some(ts(1051))
        }
    );
    assert!(
        held.message
            .contains("waits for the Numaflow controller trial")
    );
    assert!(w.upgrading().awaiting_controller_trial);
    assert_eq!(
        w.upgrading().assessment_result,
        Some(AssessmentResult::Unknown),
        "a held trial is not recorded as a success the engine would finish"
    );
    // Held passes change nothing.
    w.now = 1051;
    assert_eq!(
        w.run().action,
        Action::Wait {
            until: Some(ts(1061))
        }
    );
    // The controller trial succeeded: promoted.
    w.hold = false;
    w.now = 1061;
    let p = w.run();
    assert_eq!(
        p.action,
        Action::Promote {
            trial: "mvr-1".into(),
            previous: vec!["mvr-0".into()],
            result_label: "succeeded"
        }
    );
    assert!(!w.upgrading().awaiting_controller_trial);
}

/// A name count that fell behind (a status write lost, or a rollout deleted and created again
/// while its first child lives) never names the trial after a live child: the trial would be
/// "created" as AlreadyExists and the promoted child taken for it.
#[test]
fn a_trial_never_takes_a_live_childs_name() {
    let mut w = World::mv();
    w.record.name_count = None;
    assert_eq!(w.run().action, Action::ObservePromotedPods);
    w.pods = Some(pods(&[("mvr-0", 4)]));
    let mut action = w.run().action;
    if action == Action::Persist {
        action = w.run().action;
    }
    let Action::CreateTrial { name, .. } = action else {
        panic!("expected a trial to be created, got {action:?}");
    };
    assert_eq!(name, "mvr-1");
    assert_eq!(w.record.name_count, Some(2));
}
