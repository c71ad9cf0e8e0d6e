use super::*;
use proptest::prelude::*;

const NOW: i64 = 1_800_000_000;

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(NOW + secs).expect("time")
}

fn rfc(secs: i64) -> String {
    at(secs).strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn cfg() -> RecycleConfig {
    RecycleConfig {
        max_recyclable: Duration::from_secs(60 * 60),
        force_drain_failure_wait: Duration::from_secs(15),
        keep_undrained: false,
        scale_factor: 50,
    }
}

fn spec(image: &str, in_scale: Value, out_scale: Value) -> Value {
    json!({
        "interStepBufferServiceName": "isb-0",
        "lifecycle": {"pauseGracePeriodSeconds": 60},
        "vertices": [
            {"name": "in", "scale": in_scale, "source": {"generator": {}}},
            {"name": "out", "scale": out_scale, "udf": {"container": {"image": image}}}
        ],
        "edges": [{"from": "in", "to": "out"}]
    })
}

fn pipeline(reason: &str, annotations: Value, spec: Value, status: Value) -> Value {
    let mut ann = json!({
        "numaplane.numaproj.io/requires-drain": "true",
        "numaplane.numaproj.io/recyclable-start-time": rfc(-60),
    });
    for (k, v) in annotations.as_object().into_iter().flatten() {
        ann[k] = v.clone();
    }
    json!({
        "metadata": {
            "name": "test-pipeline-1",
            "generation": 2,
            "labels": {
                "numaplane.numaproj.io/upgrade-state": "recyclable",
                "numaplane.numaproj.io/upgrade-state-reason": reason,
            },
            "annotations": ann,
        },
        "spec": spec,
        "status": status,
    })
}

fn paused(mut s: Value) -> Value {
    s["lifecycle"]["desiredPhase"] = "Paused".into();
    s
}

fn hist() -> BTreeMap<String, i64> {
    BTreeMap::from([("in".into(), 1), ("out".into(), 3)])
}

fn run(p: &Value, promoted: Option<Promoted<'_>>) -> Step {
    run_with(p, promoted, cfg(), false)
}

fn run_with(p: &Value, promoted: Option<Promoted<'_>>, config: RecycleConfig, force: bool) -> Step {
    let rollout = spec(
        "good",
        json!({"min": 1, "max": 2}),
        json!({"min": 2, "max": 4}),
    );
    let h = hist();
    step(&RecycleInput {
        pipeline: p,
        allow_data_loss: false,
        rollout_spec: &rollout,
        force_promote: force,
        historical_pod_count: &h,
        promoted,
        vertices: Some(&[]),
        config,
        now: at(0),
    })
}

fn running() -> Value {
    json!({"phase": "Running", "observedGeneration": 2})
}

#[test]
fn every_reason_drains_and_only_a_failed_trial_skips_its_own_spec() {
    for reason in [
        Some("delete-recreate"),
        Some("purge"),
        Some("progressive-success"),
        Some("progressive-replaced"),
        Some("discontinue-progressive"),
        Some(""),
        Some("something-else"),
        None,
    ] {
        assert!(tries_original_first(reason), "{reason:?}");
    }
    assert!(!tries_original_first(Some("progressive-replaced-failed")));
}

#[test]
fn missing_empty_or_unknown_reasons_drain_instead_of_deleting() {
    // The reference deleted these at once, undrained.
    let s = spec("x", json!({"min": 1}), json!({"min": 1}));
    for reason in ["", "something-else", "delete-recreate", "purge"] {
        let p = pipeline(reason, json!({}), s.clone(), running());
        assert_eq!(
            run(&p, None),
            Step::Scale(vec![("in".into(), 0), ("out".into(), 2)]),
            "{reason:?}"
        );
    }
    let mut p = pipeline("", json!({}), s.clone(), running());
    p["metadata"]["labels"]
        .as_object_mut()
        .expect("labels")
        .remove("numaplane.numaproj.io/upgrade-state-reason");
    assert!(matches!(run(&p, None), Step::Scale(_)));
    // A delete-recreate pipeline the ISB service's pause request left Paused and drained goes
    // at once, reported drained.
    let drained = json!({"phase": "Paused", "drainedOnPause": true, "observedGeneration": 2});
    let p = pipeline("delete-recreate", json!({}), paused(s), drained);
    assert_eq!(run(&p, None), Step::Delete(DrainResult::StandardDrain));
}

#[test]
fn allowances_delete_without_draining() {
    let s = spec("x", json!({"min": 1}), json!({"min": 1}));
    let p = pipeline(
        "progressive-success",
        json!({"numaplane.numaproj.io/marked-for-deletion": "true"}),
        s.clone(),
        running(),
    );
    assert_eq!(run(&p, None), Step::Delete(DrainResult::DrainNotRequired));
    let p = pipeline("progressive-success", json!({}), s.clone(), running());
    assert_eq!(
        run_with(&p, None, cfg(), true),
        Step::Delete(DrainResult::DrainNotRequired)
    );
    for requires in [Value::Null, json!("false")] {
        let mut p = pipeline("progressive-success", json!({}), s.clone(), running());
        p["metadata"]["annotations"]["numaplane.numaproj.io/requires-drain"] = requires;
        assert_eq!(run(&p, None), Step::Delete(DrainResult::DrainNotRequired));
    }
    // allow-data-loss on the rollout lets an ISB service recreate take its pipelines undrained,
    // and nothing else.
    let rollout = spec("good", json!({"min": 1}), json!({"min": 1}));
    let h = hist();
    for (reason, deleted) in [("delete-recreate", true), ("progressive-success", false)] {
        let p = pipeline(reason, json!({}), s.clone(), running());
        let out = step(&RecycleInput {
            pipeline: &p,
            allow_data_loss: true,
            rollout_spec: &rollout,
            force_promote: false,
            historical_pod_count: &h,
            promoted: None,
            vertices: None,
            config: cfg(),
            now: at(0),
        });
        assert_eq!(
            out == Step::Delete(DrainResult::DrainNotRequired),
            deleted,
            "{reason}: {out:?}"
        );
    }
}

#[test]
fn expiry_deletes_or_keeps() {
    let s = spec("x", json!({"min": 1}), json!({"min": 1}));
    let old = json!({"numaplane.numaproj.io/recyclable-start-time": rfc(-2 * 3600)});
    let p = pipeline("progressive-success", old.clone(), s.clone(), running());
    assert_eq!(run(&p, None), Step::Delete(DrainResult::DrainIncomplete));
    let keep = RecycleConfig {
        keep_undrained: true,
        ..cfg()
    };
    assert_eq!(run_with(&p, None, keep, false), Step::KeepExpired);
    // No start time: stamped now, never taken as expired (the reference deleted it undrained).
    let mut p = pipeline("progressive-success", json!({}), s.clone(), running());
    p["metadata"]["annotations"]["numaplane.numaproj.io/recyclable-start-time"] = Value::Null;
    assert_eq!(run(&p, None), Step::StampStartTime);
    assert_eq!(run_with(&p, None, keep, false), Step::StampStartTime);
    // A start time that can't be read never deletes: the pipeline waits, saying why.
    let bad = json!({"numaplane.numaproj.io/recyclable-start-time": "yesterday"});
    let p = pipeline("progressive-success", bad, s, running());
    assert!(
        matches!(run(&p, None), Step::Wait { why, .. } if why.contains("recyclable-start-time"))
    );
}

#[test]
fn a_healthy_pipeline_drains_with_its_own_spec() {
    // Scale first: sources 0, others ceil(historical × 50%) — out: ceil(3/2) = 2.
    let s = spec(
        "x",
        json!({"min": 1, "max": 2}),
        json!({"min": 2, "max": 4}),
    );
    let p = pipeline("progressive-success", json!({}), s, running());
    assert_eq!(
        run(&p, None),
        Step::Scale(vec![("in".into(), 0), ("out".into(), 2)])
    );
    // Scaled and observed: pause with the stretched grace period (60 × 100/50).
    let s = spec(
        "x",
        json!({"min": 0, "max": 0}),
        json!({"min": 2, "max": 2}),
    );
    let p = pipeline("progressive-success", json!({}), s.clone(), running());
    assert_eq!(run(&p, None), Step::Pause { grace_seconds: 120 });
    // Scaled but not yet observed by Numaflow: wait.
    let p = pipeline(
        "progressive-success",
        json!({}),
        s.clone(),
        json!({"phase": "Running", "observedGeneration": 1}),
    );
    assert!(matches!(run(&p, None), Step::Wait { .. }));
    // Pausing: wait, with expiry as the deadline.
    let p = pipeline(
        "progressive-success",
        json!({}),
        paused(s.clone()),
        json!({"phase": "Pausing", "observedGeneration": 2}),
    );
    assert_eq!(
        run(&p, None),
        Step::Wait {
            why: "draining pipeline test-pipeline-1 (phase Pausing)".into(),
            until: Some(at(-60 + 3600)),
        }
    );
    // Paused and drained: deleted as a standard drain.
    let p = pipeline(
        "progressive-success",
        json!({}),
        paused(s),
        json!({"phase": "Paused", "drainedOnPause": true, "observedGeneration": 2}),
    );
    assert_eq!(run(&p, None), Step::Delete(DrainResult::StandardDrain));
}

#[test]
fn a_failed_pipeline_waits_then_force_drains_with_the_promoted_spec() {
    let bad = paused(spec(
        "bad",
        json!({"min": 0, "max": 0}),
        json!({"min": 2, "max": 2}),
    ));
    let good = spec(
        "good",
        json!({"min": 1, "max": 2}),
        json!({"min": 2, "max": 4}),
    );
    let promoted = Promoted {
        name: "test-pipeline-3",
        spec: &good,
        matches_rollout: true,
    };
    let failed = json!({"phase": "Failed", "observedGeneration": 2});
    let p = pipeline(
        "progressive-replaced",
        json!({}),
        bad.clone(),
        failed.clone(),
    );
    assert_eq!(run(&p, Some(promoted)), Step::MarkFailureStart);
    let since = json!({"numaplane.numaproj.io/drain-failure-start-time": rfc(-5)});
    let p = pipeline("progressive-replaced", since, bad.clone(), failed.clone());
    assert!(matches!(run(&p, Some(promoted)), Step::Wait { until: Some(u), .. } if u == at(10)));
    let since = json!({"numaplane.numaproj.io/drain-failure-start-time": rfc(-20)});
    let p = pipeline("progressive-replaced", since, bad.clone(), failed);
    let Step::ForceDrain {
        promoted: name,
        spec,
    } = run(&p, Some(promoted))
    else {
        panic!("force drain expected");
    };
    assert_eq!(name, "test-pipeline-3");
    assert_eq!(
        spec["vertices"][0]["scale"],
        json!({"min": 0, "max": 0, "disabled": false})
    );
    assert_eq!(spec["vertices"][1]["scale"], json!({"min": 2, "max": 4}));
    assert_eq!(spec["vertices"][1]["udf"]["container"]["image"], "good");
    assert_eq!(spec["lifecycle"]["desiredPhase"], "Running");
    assert_eq!(spec["interStepBufferServiceName"], "isb-0");
}

#[test]
fn paused_but_not_drained_goes_to_force_drain() {
    let s = paused(spec(
        "x",
        json!({"min": 0, "max": 0}),
        json!({"min": 2, "max": 2}),
    ));
    let good = spec(
        "good",
        json!({"min": 1, "max": 2}),
        json!({"min": 2, "max": 4}),
    );
    let p = pipeline(
        "progressive-replaced",
        json!({}),
        s,
        json!({"phase": "Paused", "drainedOnPause": false, "observedGeneration": 2}),
    );
    let promoted = Promoted {
        name: "test-pipeline-3",
        spec: &good,
        matches_rollout: true,
    };
    assert!(matches!(run(&p, Some(promoted)), Step::ForceDrain { .. }));
    // Without a usable promoted spec it waits scaled to zero.
    let stale = Promoted {
        matches_rollout: false,
        ..promoted
    };
    assert!(matches!(run(&p, Some(stale)), Step::ScaleToZero(_)));
    assert!(matches!(run(&p, None), Step::ScaleToZero(_)));
}

#[test]
fn force_drain_runs_then_drains_and_records_completion() {
    let good = spec(
        "good",
        json!({"min": 1, "max": 2}),
        json!({"min": 2, "max": 4}),
    );
    let promoted = Promoted {
        name: "test-pipeline-3",
        spec: &good,
        matches_rollout: true,
    };
    let started = json!({"numaplane.numaproj.io/force-drain-specs-started": "test-pipeline-3,"});
    let forced = forced_spec(&good, Some("isb-0"));
    // Still Paused from before: wait until it runs with the forced spec.
    let p = pipeline(
        "progressive-replaced-failed",
        started.clone(),
        forced.clone(),
        json!({"phase": "Paused", "observedGeneration": 2}),
    );
    assert!(matches!(run(&p, Some(promoted)), Step::Wait { .. }));
    // Running: scale out to ceil(3 × 50%) = 2, in to 0.
    let p = pipeline(
        "progressive-replaced-failed",
        started.clone(),
        forced,
        running(),
    );
    assert_eq!(
        run(&p, Some(promoted)),
        Step::Scale(vec![("in".into(), 0), ("out".into(), 2)])
    );
    let drained_spec = paused(spec(
        "good",
        json!({"min": 0, "max": 0}),
        json!({"min": 2, "max": 2}),
    ));
    for drained in [true, false] {
        let p = pipeline(
            "progressive-replaced-failed",
            started.clone(),
            drained_spec.clone(),
            json!({"phase": "Paused", "drainedOnPause": drained, "observedGeneration": 2}),
        );
        assert_eq!(
            run(&p, Some(promoted)),
            Step::ForceDrainDone {
                promoted: "test-pipeline-3".into(),
                drained,
                dedup: true
            }
        );
    }
    // Recorded as drained but not deleted (the deletion met a newer version): deleted now, also
    // once scaled to zero.
    let mut done = started.clone();
    done["numaplane.numaproj.io/force-drain-specs-completed"] = "test-pipeline-3,".into();
    for scale in [json!({"min": 2, "max": 2}), json!({"min": 0, "max": 0})] {
        let p = pipeline(
            "progressive-replaced-failed",
            done.clone(),
            paused(spec("good", json!({"min": 0, "max": 0}), scale)),
            json!({"phase": "Paused", "drainedOnPause": true, "observedGeneration": 2}),
        );
        assert_eq!(
            run(&p, Some(promoted)),
            Step::Delete(DrainResult::ForceDrain)
        );
    }
    // Already tried with this promoted spec: wait scaled to zero for the next one.
    let mut done = started.clone();
    done["numaplane.numaproj.io/force-drain-specs-completed"] = "test-pipeline-3,".into();
    let p = pipeline(
        "progressive-replaced-failed",
        done,
        drained_spec,
        json!({"phase": "Paused", "drainedOnPause": false, "observedGeneration": 2}),
    );
    assert!(matches!(run(&p, Some(promoted)), Step::ScaleToZero(_)));
}

#[test]
fn a_rollout_that_lets_no_data_in_keeps_the_pipeline_at_zero() {
    let s = spec("x", json!({"min": 1}), json!({"min": 1}));
    let p = pipeline("progressive-success", json!({}), s, running());
    let rollout = paused(spec("good", json!({"min": 1}), json!({"min": 1})));
    let h = hist();
    let step = step(&RecycleInput {
        pipeline: &p,
        allow_data_loss: false,
        rollout_spec: &rollout,
        force_promote: false,
        historical_pod_count: &h,
        promoted: None,
        vertices: None,
        config: cfg(),
        now: at(0),
    });
    assert!(matches!(step, Step::ScaleToZero(_)));
}

#[test]
fn a_paused_rollout_lets_a_drained_paused_pipeline_go_at_once() {
    let rollout = paused(spec("good", json!({"min": 1}), json!({"min": 1})));
    let h = hist();
    let run = |p: &Value| {
        step(&RecycleInput {
            pipeline: p,
            allow_data_loss: false,
            rollout_spec: &rollout,
            force_promote: false,
            historical_pod_count: &h,
            promoted: None,
            vertices: None,
            config: cfg(),
            now: at(0),
        })
    };
    let s = paused(spec("x", json!({"min": 1}), json!({"min": 1})));
    let drained = json!({"phase": "Paused", "drainedOnPause": true, "observedGeneration": 2});
    let p = pipeline("progressive-success", json!({}), s.clone(), drained.clone());
    assert_eq!(run(&p), Step::Delete(DrainResult::StandardDrain));
    // Paused without draining, or still pausing: it may hold data, so it waits at zero.
    for status in [
        json!({"phase": "Paused", "drainedOnPause": false, "observedGeneration": 2}),
        json!({"phase": "Pausing", "observedGeneration": 2}),
    ] {
        let p = pipeline("progressive-success", json!({}), s.clone(), status);
        assert!(matches!(run(&p), Step::ScaleToZero(_)), "{p}");
    }
    // Asked to run again (the drained flag is stale until Numaflow resumes it): waits too.
    let p = pipeline(
        "progressive-success",
        json!({}),
        spec("x", json!({"min": 1}), json!({"min": 1})),
        drained,
    );
    assert!(matches!(run(&p), Step::ScaleToZero(_)));
    // It never ingested (no requires-drain): deleted at once.
    let mut p = pipeline("progressive-success", json!({}), s, running());
    p["metadata"]["annotations"]
        .as_object_mut()
        .expect("annotations")
        .remove("numaplane.numaproj.io/requires-drain");
    assert_eq!(run(&p), Step::Delete(DrainResult::DrainNotRequired));
}

#[test]
fn drain_scales_follow_the_reference_rules() {
    // f = 30%: historical 3 → 1, 5 → 2; not in history but in the rollout with min 10 → 10;
    // in the rollout without scale → 1; in neither → own scale.min.
    let pipeline = json!({"vertices": [
        {"name": "src", "source": {}, "scale": {"min": 3}},
        {"name": "a"}, {"name": "b"}, {"name": "c"}, {"name": "d"},
        {"name": "e", "scale": {"min": 50}}
    ]});
    let rollout = json!({"vertices": [{"name": "c", "scale": {"min": 10}}, {"name": "d"}]});
    let h = BTreeMap::from([("a".into(), 3), ("b".into(), 5)]);
    assert_eq!(
        drain_scales(&pipeline, &rollout, &h, 30),
        vec![
            ("src".into(), 0),
            ("a".into(), 1),
            ("b".into(), 2),
            ("c".into(), 10),
            ("d".into(), 1),
            ("e".into(), 50)
        ]
    );
    assert_eq!(drain_grace_seconds(&json!({}), 50), 60);
    assert_eq!(
        drain_grace_seconds(&json!({"lifecycle": {"pauseGracePeriodSeconds": 60}}), 30),
        200
    );
}

#[test]
fn can_ingest_needs_running_and_an_open_source() {
    assert!(can_ingest(&spec("x", json!({"max": 2}), json!({}))));
    assert!(can_ingest(&spec("x", json!(null), json!({}))));
    assert!(!can_ingest(&spec(
        "x",
        json!({"min": 0, "max": 0}),
        json!({})
    )));
    assert!(!can_ingest(&paused(spec(
        "x",
        json!({"max": 2}),
        json!({})
    ))));
    assert!(!can_ingest(&json!({"vertices": [{"name": "a"}]})));
}

#[test]
fn annotation_lists_are_exact_tokens() {
    assert_eq!(names_in(Some("a-1,a-10,")), vec!["a-1", "a-10"]);
    assert!(!names_in(Some("a-10,")).contains(&"a-1"));
    assert_eq!(appended(Some("a,"), "b", true), "a,b,");
    assert_eq!(appended(Some("a,b,"), "b", true), "a,b,");
    assert_eq!(appended(Some("a,b,"), "b", false), "a,b,b,");
    assert_eq!(appended(None, "a", true), "a,");
}

/// Numaflow's status of a Running pipeline whose vertex cannot run (an unpullable image).
fn running_unhealthy() -> Value {
    json!({"phase": "Running", "observedGeneration": 2, "conditions": [
        {"type": "VerticesHealthy", "status": "False", "reason": "Unhealthy",
         "message": "Vertex \"out\" is unhealthy: ImagePullBackOff"}
    ]})
}

#[test]
fn an_unhealthy_discontinued_trial_goes_straight_to_force_drain() {
    let bad = spec(
        "bad",
        json!({"min": 1, "max": 2}),
        json!({"min": 2, "max": 4}),
    );
    let good = spec(
        "good",
        json!({"min": 1, "max": 2}),
        json!({"min": 2, "max": 4}),
    );
    let promoted = Promoted {
        name: "test-pipeline-0",
        spec: &good,
        matches_rollout: true,
    };
    let p = pipeline(
        "discontinue-progressive",
        json!({}),
        bad.clone(),
        running_unhealthy(),
    );
    assert!(
        matches!(run(&p, Some(promoted)), Step::ForceDrain { ref promoted, .. } if promoted == "test-pipeline-0")
    );
    // Without a usable promoted spec it is scaled to zero, never paused on its own spec.
    assert!(matches!(run(&p, None), Step::ScaleToZero(_)));
    // Healthy, it drains with its own spec first (scaled for draining).
    let p = pipeline("discontinue-progressive", json!({}), bad.clone(), running());
    assert!(matches!(run(&p, Some(promoted)), Step::Scale(_)));
    // A pause it already began with its own spec is seen through.
    let p = pipeline(
        "discontinue-progressive",
        json!({}),
        paused(bad.clone()),
        json!({"phase": "Pausing", "observedGeneration": 2}),
    );
    assert!(
        matches!(run(&p, Some(promoted)), Step::Wait { ref why, .. } if why.contains("Pausing"))
    );
    // Other reasons keep the reference's order: own spec first, even when unhealthy.
    let p = pipeline("progressive-replaced", json!({}), bad, running_unhealthy());
    assert!(matches!(run(&p, Some(promoted)), Step::Scale(_)));
}

#[test]
fn force_drain_pauses_only_once_healthy_with_the_promoted_spec() {
    let good = spec(
        "good",
        json!({"min": 1, "max": 2}),
        json!({"min": 2, "max": 4}),
    );
    let promoted = Promoted {
        name: "test-pipeline-3",
        spec: &good,
        matches_rollout: true,
    };
    let started = json!({
        "numaplane.numaproj.io/force-drain-specs-started": "test-pipeline-3,",
        "numaplane.numaproj.io/force-drain-spec-time": rfc(-5),
    });
    let scaled = spec(
        "good",
        json!({"min": 0, "max": 0}),
        json!({"min": 2, "max": 2}),
    );
    // Numaflow still replaces the vertex that held the data: no pause yet, until 15 s after
    // the spec was applied.
    let p = pipeline(
        "progressive-replaced-failed",
        started.clone(),
        scaled.clone(),
        running_unhealthy(),
    );
    assert!(
        matches!(run(&p, Some(promoted)), Step::Wait { ref why, until: Some(u) } if why.contains("healthy") && u == at(10))
    );
    // Healthy: pause to drain.
    let p = pipeline(
        "progressive-replaced-failed",
        started.clone(),
        scaled.clone(),
        running(),
    );
    assert_eq!(run(&p, Some(promoted)), Step::Pause { grace_seconds: 120 });
    // That takes the vertices: asked for first, and one not ready yet holds the pause.
    let rollout = spec(
        "good",
        json!({"min": 1, "max": 2}),
        json!({"min": 2, "max": 4}),
    );
    let h = hist();
    let with = |vertices: Option<&[Value]>| {
        step(&RecycleInput {
            pipeline: &p,
            allow_data_loss: false,
            rollout_spec: &rollout,
            force_promote: false,
            historical_pod_count: &h,
            promoted: Some(promoted),
            vertices,
            config: cfg(),
            now: at(0),
        })
    };
    assert_eq!(with(None), Step::ObserveVertices);
    let starting = [json!({"metadata": {"name": "test-pipeline-1-out"},
                           "status": {"desiredReplicas": 2, "readyReplicas": 1}})];
    assert!(matches!(with(Some(&starting)), Step::Wait { .. }));
    let ready = [json!({"metadata": {"name": "test-pipeline-1-out"},
                        "status": {"desiredReplicas": 2, "readyReplicas": 2}})];
    assert_eq!(with(Some(&ready)), Step::Pause { grace_seconds: 120 });
    // Still unhealthy once the wait is over (a promoted spec that cannot run here): paused
    // anyway, as the reference does at once.
    let mut late = started.clone();
    late["numaplane.numaproj.io/force-drain-spec-time"] = rfc(-20).into();
    let p = pipeline(
        "progressive-replaced-failed",
        late,
        scaled.clone(),
        running_unhealthy(),
    );
    assert_eq!(run(&p, Some(promoted)), Step::Pause { grace_seconds: 120 });
    // Force-applied by a controller that did not record the time: paused at once.
    let mut unrecorded = started;
    unrecorded
        .as_object_mut()
        .expect("annotations")
        .remove("numaplane.numaproj.io/force-drain-spec-time");
    let p = pipeline(
        "progressive-replaced-failed",
        unrecorded,
        scaled,
        running_unhealthy(),
    );
    assert_eq!(run(&p, Some(promoted)), Step::Pause { grace_seconds: 120 });
}

fn phase_strategy() -> impl Strategy<Value = (&'static str, bool)> {
    prop_oneof![
        Just(("Running", false)),
        Just(("Pausing", false)),
        Just(("Paused", false)),
        Just(("Paused", true)),
        Just(("Failed", false)),
        Just(("", false)),
    ]
}

proptest! {
    /// No recyclable pipeline that requires draining is deleted before it reports drained,
    /// unless expiry (from a recorded start time), force-promote, marked-for-deletion or, for an
    /// ISB service recreate, allow-data-loss says so, whatever the reason label says.
    #[test]
    fn never_deleted_undrained_without_a_reason(
        reason in prop_oneof![
            Just("progressive-success"), Just("progressive-replaced"),
            Just("progressive-replaced-failed"), Just("discontinue-progressive"),
            Just("delete-recreate"), Just("purge"), Just(""), Just("unknown-reason")
        ],
        allow_data_loss in any::<bool>(),
        no_start_time in any::<bool>(),
        (phase, drained) in phase_strategy(),
        wants_paused in any::<bool>(),
        marked in any::<bool>(),
        force in any::<bool>(),
        age_min in 0i64..200,
        failed_for in proptest::option::of(0i64..60),
        started in any::<bool>(),
        completed in any::<bool>(),
        has_promoted in any::<bool>(),
        matches in any::<bool>(),
        observed_lag in 0i64..2,
        rollout_paused in any::<bool>(),
    ) {
        let mut ann = json!({"numaplane.numaproj.io/recyclable-start-time": rfc(-age_min * 60)});
        if marked { ann["numaplane.numaproj.io/marked-for-deletion"] = "true".into(); }
        if let Some(f) = failed_for {
            ann["numaplane.numaproj.io/drain-failure-start-time"] = rfc(-f).into();
        }
        if started { ann["numaplane.numaproj.io/force-drain-specs-started"] = "p-9,".into(); }
        if completed { ann["numaplane.numaproj.io/force-drain-specs-completed"] = "p-9,".into(); }
        let mut s = spec("x", json!({"min": 0, "max": 0}), json!({"min": 2, "max": 2}));
        if wants_paused { s = paused(s); }
        let mut p = pipeline(reason, ann, s,
            json!({"phase": phase, "drainedOnPause": drained, "observedGeneration": 2 - observed_lag}));
        if no_start_time {
            p["metadata"]["annotations"]
                .as_object_mut()
                .expect("annotations")
                .remove("numaplane.numaproj.io/recyclable-start-time");
        }
        let good = spec("good", json!({"min": 1}), json!({"min": 1}));
        let mut rollout = good.clone();
        if rollout_paused { rollout = paused(rollout); }
        let h = hist();
        let promoted = has_promoted.then_some(Promoted { name: "p-9", spec: &good, matches_rollout: matches });
        let out = step(&RecycleInput {
            pipeline: &p, allow_data_loss, rollout_spec: &rollout, force_promote: force,
            historical_pod_count: &h, promoted, vertices: Some(&[]), config: cfg(), now: at(0),
        });
        let expired = !no_start_time && age_min >= 60;
        let reported_drained = wants_paused && phase == "Paused" && drained;
        match out {
            Step::Delete(DrainResult::DrainNotRequired) => prop_assert!(
                marked || force || (allow_data_loss && reason == "delete-recreate")
            ),
            Step::Delete(DrainResult::DrainIncomplete) => prop_assert!(expired),
            Step::Delete(DrainResult::StandardDrain) | Step::ForceDrainDone { drained: true, .. } => {
                prop_assert!(reported_drained)
            }
            // (a drained force drain whose deletion did not go through)
            Step::Delete(DrainResult::ForceDrain) => prop_assert!(reported_drained && completed),
            Step::KeepExpired => prop_assert!(false, "keep_undrained is off"),
            _ => {}
        }
    }
}

#[test]
fn a_paused_scaled_down_pipeline_is_still_the_same_definition() {
    let spec = json!({"vertices": [{"name": "in", "source": {"generator": {}}, "scale": {"min": 2}},
                                   {"name": "out", "sink": {"log": {}}}],
                      "lifecycle": {"desiredPhase": "Running"}});
    let drained = json!({"vertices": [{"name": "in", "source": {"generator": {}}, "scale": {"min": 0, "max": 0}},
                                      {"name": "out", "sink": {"log": {}}, "scale": {"max": 0}}],
                         "lifecycle": {"desiredPhase": "Paused"}});
    assert!(same_definition(&spec, &drained));
    let other = json!({"vertices": [{"name": "in", "source": {"generator": {"rpu": 5}}},
                                    {"name": "out", "sink": {"log": {}}}]});
    assert!(!same_definition(&spec, &other));
}
