//! The upgrade invariant checker the integration suites run over their namespaces' history
//! (`support::invariants`), fed made-up histories: it catches each broken invariant, including
//! the ones an earlier checker let through because it believed the operator (a drain seen once
//! and never expiring, an Event excusing an undrained deletion, a child whose rollout it never
//! saw), and reports nothing when all hold.

mod support;

use k8s_openapi::api::events::v1::Event;
use numaplane_api::keys::{annotations, labels};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use support::invariants::judge::{Rules, Seen, Verdict, judge};

const PR_UID: &str = "uid-pr";

/// `patch` merged into `base` (JSON merge patch: `null` removes).
fn merged(mut base: Value, patch: &Value) -> Value {
    fn merge(a: &mut Value, b: &Value) {
        match (a.as_object_mut(), b.as_object()) {
            (Some(a), Some(b)) => {
                for (k, v) in b {
                    if v.is_null() {
                        a.remove(k);
                    } else {
                        merge(a.entry(k.clone()).or_insert(Value::Null), v);
                    }
                }
            }
            _ => *a = b.clone(),
        }
    }
    merge(&mut base, patch);
    base
}

/// PipelineRollout `pr` at `rv`, with `extra` merged in.
fn rollout(rv: u64, extra: Value) -> Seen {
    let obj = json!({"metadata": {"name": "pr", "uid": PR_UID, "generation": 1},
        "status": {"phase": "Deployed", "observedGeneration": 1}});
    Seen::new(rv, "PipelineRollout", merged(obj, &extra))
}

/// A child of `kind` named `name` (uid `uid-<name>`) of rollout `pr`, in upgrade state `state`,
/// with `extra` merged in.
fn child(kind: &'static str, rv: u64, name: &str, state: &str, extra: Value) -> Seen {
    let rollout_kind = match kind {
        "Pipeline" => "PipelineRollout",
        "MonoVertex" => "MonoVertexRollout",
        _ => "ISBServiceRollout",
    };
    let obj = json!({"metadata": {
        "name": name, "uid": format!("uid-{name}"),
        "labels": {labels::PARENT_ROLLOUT_NAME: "pr", labels::UPGRADE_STATE: state},
        "ownerReferences": [{"kind": rollout_kind, "name": "pr", "uid": PR_UID, "controller": true}]
    }});
    Seen::new(rv, kind, merged(obj, &extra))
}

fn pipeline(rv: u64, name: &str, state: &str, extra: Value) -> Seen {
    child("Pipeline", rv, name, state, extra)
}

/// A pipeline that may hold data: marked `requires-drain`, running with a source.
fn running() -> Value {
    json!({
        "metadata": {"annotations": {annotations::REQUIRES_DRAIN: "true"}},
        "spec": {"vertices": [{"name": "in", "source": {"generator": {}}}, {"name": "out", "sink": {"log": {}}}]},
        "status": {"phase": "Running"}
    })
}

/// `running()`, then paused as asked and drained.
fn drained() -> Value {
    merged(
        running(),
        &json!({"spec": {"lifecycle": {"desiredPhase": "Paused"}},
            "status": {"phase": "Paused", "drainedOnPause": true}}),
    )
}

/// Recyclable with reason `reason`, since `start` (RFC 3339).
fn recyclable_since(start: &str) -> Value {
    json!({"metadata": {
        "labels": {labels::UPGRADE_STATE_REASON: "progressive-success"},
        "annotations": {annotations::RECYCLABLE_START_TIME: start}
    }})
}

/// `s`, arrived at the recorder at `at` (RFC 3339).
fn arrived(mut s: Seen, at: &str) -> Seen {
    s.wall = at.parse().expect("time");
    s
}

fn run(log: &[Seen], events: &[Event], rules: &Rules) -> Verdict {
    judge(
        log,
        events,
        rules,
        Instant::now(),
        Duration::from_secs(3600),
    )
}

fn violations(log: &[Seen]) -> Vec<String> {
    run(log, &[], &Rules::default()).violations
}

fn assert_one(log: &[Seen], what: &str, containing: &str) {
    let v = violations(log);
    assert_eq!(v.len(), 1, "{what}: {v:#?}");
    assert!(v[0].contains(containing), "{what}: {v:#?}");
}

fn assert_clean(log: &[Seen], what: &str) {
    let v = violations(log);
    assert!(v.is_empty(), "{what}: {v:#?}");
}

// (a) A pipeline paused and drained once, resumed, then deleted undrained: only its last
// version before the deletion counts.
#[test]
fn a_drain_before_a_resume_does_not_cover_the_deletion() {
    let p = |rv, extra: Value| pipeline(rv, "pr-0", "promoted", extra);
    let resumed = merged(
        drained(),
        &json!({"spec": {"lifecycle": {"desiredPhase": "Running"}},
            "status": {"phase": "Running", "drainedOnPause": false}}),
    );
    let recycled = merged(
        resumed.clone(),
        &json!({"metadata": {"labels": {labels::UPGRADE_STATE: "recyclable"}}}),
    );
    let log = vec![
        rollout(1, json!({})),
        p(2, running()),
        p(3, drained()),
        p(4, resumed),
        pipeline(5, "pr-0", "recyclable", recycled.clone()),
        pipeline(5, "pr-0", "recyclable", recycled).deleted_at(6),
    ];
    assert_one(&log, "drained, resumed, deleted", "deleted undrained");
    // Its last version drained: clean.
    let done = merged(
        drained(),
        &json!({"metadata": {"labels": {labels::UPGRADE_STATE: "recyclable"}}}),
    );
    let log = vec![
        rollout(1, json!({})),
        p(2, running()),
        pipeline(3, "pr-0", "recyclable", done.clone()),
        pipeline(3, "pr-0", "recyclable", done).deleted_at(4),
    ];
    assert_clean(&log, "drained, then deleted");
}

// A drained pipeline's name given to a new object says nothing about the new one.
#[test]
fn a_drain_is_matched_by_uid_not_by_name() {
    let old = merged(
        drained(),
        &json!({"metadata": {"labels": {labels::UPGRADE_STATE: "recyclable"}}}),
    );
    let mut new = pipeline(5, "pr-0", "recyclable", running());
    new.uid = "uid-pr-0-again".into();
    new.obj["metadata"]["uid"] = json!("uid-pr-0-again");
    let log = vec![
        rollout(1, json!({})),
        pipeline(2, "pr-0", "recyclable", old.clone()),
        pipeline(2, "pr-0", "recyclable", old).deleted_at(3),
        new.clone(),
        new.deleted_at(6),
    ];
    assert_one(&log, "a new pr-0 deleted undrained", "uid-pr-0-again");
}

// (b) An Event saying why data was dropped excuses nothing; it is quoted as a claim.
#[test]
fn an_event_does_not_excuse_an_undrained_deletion() {
    let p = pipeline(
        2,
        "pr-0",
        "recyclable",
        merged(running(), &recyclable_since("2026-01-01T00:00:00Z")),
    );
    let log = vec![rollout(1, json!({})), p.clone(), p.deleted_at(3)];
    let event: Event = serde_json::from_value(json!({
        "metadata": {"name": "e"}, "eventTime": "2026-01-01T00:00:00.000000Z",
        "reason": "DrainIncomplete", "note": "pipeline pr-0: could not drain",
        "regarding": {"kind": "Pipeline", "name": "pr-0"}
    }))
    .expect("event");
    for reason in ["DrainIncomplete", "DrainNotRequired"] {
        let mut e = event.clone();
        e.reason = Some(reason.into());
        let v = run(&log, &[e], &Rules::default()).violations;
        assert_eq!(v.len(), 1, "{reason}: {v:#?}");
        assert!(
            v[0].contains(&format!("its Events said (not taken as proof): {reason}")),
            "{v:#?}"
        );
    }
}

// (b) A reason the operator writes on the pipeline counts only with an allowance visible on
// the recorded objects: allow-data-loss or forcePromote on its rollout, marked-for-deletion on
// it, or its recorded start time plus the configured maximum passed before the deletion.
#[test]
fn an_undrained_deletion_needs_an_allowance_visible_on_the_objects() {
    let reason = json!({"metadata": {"annotations": {
        "numaplane.numaproj.io/undrained-deletion-reason": "expired"}}});
    let started = recyclable_since("2026-01-01T00:00:00Z");
    let last = |extra: &Value| {
        pipeline(
            30,
            "pr-0",
            "recyclable",
            merged(merged(running(), &started), extra),
        )
    };
    let deleted_at = |extra: &Value, at: &str| {
        let mut d = last(extra).deleted_at(40);
        d.obj["metadata"]["deletionTimestamp"] = json!(at);
        d
    };
    // Recorded promoted just before midnight, recyclable from 00:00:01.
    let history = |pr: Seen, extra: &Value, at: &str| {
        vec![
            pr,
            arrived(
                pipeline(10, "pr-0", "promoted", running()),
                "2025-12-31T23:59:00Z",
            ),
            arrived(last(extra), "2026-01-01T00:00:01Z"),
            deleted_at(extra, at),
        ]
    };
    let hour = Rules::with_max_recyclable(Duration::from_secs(3600));
    let check = |log: &[Seen], rules: &Rules| run(log, &[], rules).violations;

    // The operator's reason alone.
    let log = history(rollout(1, json!({})), &reason, "2026-01-01T00:10:00Z");
    assert_eq!(check(&log, &hour).len(), 1, "a reason without an allowance");
    // Expired: start + max passed.
    let log = history(rollout(1, json!({})), &reason, "2026-01-01T01:00:00Z");
    assert!(check(&log, &hour).is_empty(), "{:#?}", check(&log, &hour));
    // ... but not when the maximum is unknown, or the start time unreadable.
    assert_eq!(check(&log, &Rules::default()).len(), 1, "max unknown");
    let bad_start =
        json!({"metadata": {"annotations": {annotations::RECYCLABLE_START_TIME: "soon"}}});
    let log = history(rollout(1, json!({})), &bad_start, "2026-01-01T05:00:00Z");
    assert_eq!(check(&log, &hour).len(), 1, "start unreadable");
    // allow-data-loss on the rollout while the pipeline was last recorded.
    let allowing = rollout(
        1,
        json!({"metadata": {"annotations": {annotations::ALLOW_DATA_LOSS: "true"}}}),
    );
    let log = history(allowing.clone(), &reason, "2026-01-01T00:10:00Z");
    assert!(check(&log, &hour).is_empty(), "{:#?}", check(&log, &hour));
    // ... but not when it was taken back before the pipeline's last version.
    let mut log = history(allowing, &reason, "2026-01-01T00:10:00Z");
    log.push(rollout(20, json!({})));
    assert_eq!(
        check(&log, &hour).len(),
        1,
        "allow-data-loss withdrawn before"
    );
    // forcePromote on the rollout, marked-for-deletion on the pipeline.
    let forcing = rollout(
        1,
        json!({"spec": {"strategy": {"progressive": {"forcePromote": true}}}}),
    );
    assert!(check(&history(forcing, &json!({}), "2026-01-01T00:10:00Z"), &hour).is_empty());
    let marked = json!({"metadata": {"annotations": {annotations::MARKED_FOR_DELETION: "true"}}});
    assert!(
        check(
            &history(rollout(1, json!({})), &marked, "2026-01-01T00:10:00Z"),
            &hour
        )
        .is_empty()
    );
    // Any allowance needs the pipeline labelled recyclable.
    let promoted = json!({"metadata": {"labels": {labels::UPGRADE_STATE: "promoted"}}, "spec": {}});
    let log = history(
        rollout(1, json!({})),
        &merged(marked, &promoted),
        "2026-01-01T00:10:00Z",
    );
    let v = check(&log, &hour);
    assert!(
        v.iter().any(|v| v.contains("not labelled recyclable")),
        "{v:#?}"
    );
}

// A start time stamped earlier than the operator wrote it (as recorded) is not believed.
#[test]
fn a_backdated_recyclable_start_time_does_not_expire_early() {
    let hour = Rules::with_max_recyclable(Duration::from_secs(3600));
    let backdated = merged(running(), &recyclable_since("2026-01-01T00:00:00Z"));
    let deleted = |p: Seen| {
        let mut d = p.deleted_at(40);
        d.obj["metadata"]["deletionTimestamp"] = json!("2026-06-01T00:00:10Z");
        d
    };
    // Written on 1 June (it arrived then, and the version before had none): not expired ten
    // seconds later, whatever it says.
    let last = arrived(
        pipeline(30, "pr-0", "recyclable", backdated.clone()),
        "2026-06-01T00:00:00Z",
    );
    let log = vec![
        rollout(1, json!({})),
        arrived(
            pipeline(10, "pr-0", "promoted", running()),
            "2026-05-31T00:00:00Z",
        ),
        last.clone(),
        deleted(last),
    ];
    let v = run(&log, &[], &hour).violations;
    assert_eq!(v.len(), 1, "{v:#?}");
    assert!(v[0].contains("not expired"), "{v:#?}");
    // Created with it (the user's own object, as the recycling tests make them): believed.
    let last = arrived(
        pipeline(30, "pr-0", "recyclable", backdated),
        "2026-06-01T00:00:00Z",
    );
    let log = vec![rollout(1, json!({})), last.clone(), deleted(last)];
    let v = run(&log, &[], &hour).violations;
    assert!(v.is_empty(), "{v:#?}");
}

// The maximum in force at the deletion counts: the config file as it changed (with a moment for
// the operator to read a change).
#[test]
fn expiry_follows_the_config_as_it_changed() {
    let start = recyclable_since("2026-01-01T00:00:00Z");
    let last = pipeline(30, "pr-0", "recyclable", merged(running(), &start));
    let at = |when: &str| {
        let mut d = last.clone().deleted_at(40);
        d.obj["metadata"]["deletionTimestamp"] = json!(when);
        vec![rollout(1, json!({})), last.clone(), d]
    };
    let t = |s: &str| s.parse().expect("time");
    let mins = |m: u64| Duration::from_secs(60 * m);
    // 60 minutes, lowered to 2 at 00:10.
    let lowered = Rules {
        max_recyclable: vec![
            (t("2025-12-01T00:00:00Z"), mins(60)),
            (t("2026-01-01T00:10:00Z"), mins(2)),
        ],
        ..Rules::default()
    };
    assert_eq!(
        run(&at("2026-01-01T00:09:00Z"), &[], &lowered)
            .violations
            .len(),
        1,
        "before"
    );
    assert!(
        run(&at("2026-01-01T00:10:01Z"), &[], &lowered)
            .violations
            .is_empty(),
        "after"
    );
    // 2 minutes, raised to 60 at 00:10: the old value may still be read for a moment.
    let raised = Rules {
        max_recyclable: vec![
            (t("2025-12-01T00:00:00Z"), mins(2)),
            (t("2026-01-01T00:10:00Z"), mins(60)),
        ],
        ..Rules::default()
    };
    assert!(
        run(&at("2026-01-01T00:10:05Z"), &[], &raised)
            .violations
            .is_empty(),
        "lag"
    );
    assert_eq!(
        run(&at("2026-01-01T00:10:30Z"), &[], &raised)
            .violations
            .len(),
        1,
        "raised"
    );
}

// (c) A child whose rollout was never recorded is judged: no owner, or an owner never seen.
#[test]
fn a_child_of_an_unknown_rollout_is_judged() {
    let orphan = |extra: Value| {
        let mut p = pipeline(2, "pr-0", "recyclable", merged(running(), &extra));
        if let Some(owner) = p.obj["metadata"]["ownerReferences"].get_mut(0) {
            owner["uid"] = json!("uid-never-seen");
        }
        p
    };
    let p = orphan(json!({}));
    assert_one(
        &[p.clone(), p.deleted_at(3)],
        "owner never recorded",
        "never recorded",
    );
    let p = orphan(json!({"metadata": {"ownerReferences": null}}));
    assert_one(
        &[p.clone(), p.deleted_at(3)],
        "no owner",
        "deleted undrained",
    );
    // A promoted child of an unknown rollout, deleted.
    let mut m = child("MonoVertex", 2, "mvr-0", "promoted", json!({}));
    m.obj["metadata"]["ownerReferences"][0]["uid"] = json!("uid-never-seen");
    assert_one(
        &[m.clone(), m.deleted_at(3)],
        "promoted, unknown rollout",
        "still promoted",
    );
    // A rollout recorded as being deleted takes its children along (a pipeline drained first:
    // `a_deleted_rollouts_pipelines_go_drained_or_with_a_visible_allowance`).
    let p = pipeline(2, "pr-0", "promoted", drained());
    let going = rollout(
        3,
        json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}),
    );
    assert_clean(
        &[
            rollout(1, json!({})),
            p.clone(),
            going,
            p.clone().deleted_at(4),
        ],
        "rollout going",
    );
    let gone = rollout(1, json!({})).deleted_at(3);
    assert_clean(
        &[rollout(1, json!({})), p.clone(), gone, p.deleted_at(4)],
        "rollout gone",
    );
}

// (d) At most one promoted child per rollout at any recorded moment.
#[test]
fn two_promoted_children_at_once_are_caught() {
    // A promotion: the trial labelled promoted, then the old one retired by the next write.
    let at = |s, t| arrived(s, t);
    let log = vec![
        rollout(1, json!({})),
        pipeline(2, "pr-0", "promoted", json!({})),
        pipeline(3, "pr-1", "trial", json!({})),
        at(
            pipeline(4, "pr-1", "promoted", json!({})),
            "2026-01-01T00:00:00Z",
        ),
        at(
            pipeline(5, "pr-0", "recyclable", json!({})),
            "2026-01-01T00:00:01Z",
        ),
    ];
    assert_clean(&log, "a promotion handed over");
    // ... but the old one must go: not retired at all, or only long after.
    assert_one(
        &log[..4],
        "the old promoted child never retired",
        "never retired",
    );
    let mut late = log.clone();
    late[4] = at(
        pipeline(5, "pr-0", "recyclable", json!({})),
        "2026-01-01T00:05:00Z",
    );
    assert_one(&late, "the old promoted child retired late", "retired only");
    // A child that was not a trial becoming promoted beside the promoted one is no promotion.
    let log = vec![
        rollout(1, json!({})),
        pipeline(2, "pr-0", "promoted", json!({})),
        pipeline(3, "pr-1", "recyclable", json!({})),
        pipeline(4, "pr-1", "promoted", json!({})),
        pipeline(5, "pr-0", "recyclable", json!({})),
    ];
    assert_one(
        &log,
        "a recyclable child promoted again",
        "2 promoted children at once",
    );
    // A promoted child first seen in a relist beside the promoted one: whether it was a trial
    // just promoted is unknown, so it is reported as not judged; seen by the watch, it is caught.
    let mut relisted = pipeline(3, "pr-1", "promoted", json!({}));
    relisted.after_gap = true;
    let log = vec![
        rollout(1, json!({})),
        pipeline(2, "pr-0", "promoted", json!({})),
        relisted,
        pipeline(4, "pr-0", "recyclable", json!({})),
    ];
    let v = run(&log, &[], &Rules::default());
    assert!(v.violations.is_empty(), "{:#?}", v.violations);
    assert_eq!(v.unjudged.len(), 1, "{:#?}", v.unjudged);
    let mut log = log;
    log[2].after_gap = false;
    assert_one(
        &log,
        "created promoted beside the promoted one",
        "2 promoted children at once",
    );
    // The old one relabelled first: never two.
    let log = vec![
        rollout(1, json!({})),
        pipeline(2, "pr-0", "promoted", json!({})),
        pipeline(3, "pr-1", "trial", json!({})),
        pipeline(4, "pr-0", "recyclable", json!({})),
        pipeline(5, "pr-1", "promoted", json!({})),
    ];
    assert_clean(&log, "handed over");
    // Children of two rollouts are counted apart (by owner uid).
    let mut other = pipeline(3, "qr-0", "promoted", json!({}));
    other.obj["metadata"]["ownerReferences"][0]["uid"] = json!("uid-qr");
    other.obj["metadata"]["labels"][labels::PARENT_ROLLOUT_NAME] = json!("qr");
    let log = vec![
        rollout(1, json!({})),
        pipeline(2, "pr-0", "promoted", json!({})),
        other,
    ];
    assert_clean(&log, "two rollouts");
    // A duplicate the test makes itself is the user's doing; a promotion by the operator while
    // it lives is not.
    let rules = Rules {
        made_by_test: ["uid-pr-1".to_string()].into(),
        ..Rules::default()
    };
    let mut log = vec![
        rollout(1, json!({})),
        pipeline(2, "pr-0", "promoted", json!({})),
        pipeline(3, "pr-1", "promoted", json!({})),
    ];
    let v = run(&log, &[], &rules).violations;
    assert!(v.is_empty(), "{v:#?}");
    log.push(pipeline(4, "pr-2", "trial", json!({})));
    log.push(pipeline(5, "pr-2", "promoted", json!({})));
    let v = run(&log, &[], &rules).violations;
    assert_eq!(v.len(), 1, "{v:#?}");
    assert!(v[0].contains("3 promoted children"), "{v:#?}");
}

// (e) No InterStepBufferService deleted while a recorded pipeline still names it.
#[test]
fn an_isbsvc_deleted_under_a_live_pipeline_is_caught() {
    let isb = |rv| {
        child(
            "InterStepBufferService",
            rv,
            "default-0",
            "recyclable",
            json!({}),
        )
    };
    let on = |isbsvc: Value| {
        pipeline(
            2,
            "pr-0",
            "promoted",
            json!({"spec": {"interStepBufferServiceName": isbsvc}}),
        )
    };
    let log = vec![on(json!("default-0")), isb(1), isb(1).deleted_at(3)];
    assert_one(&log, "used by pr-0", "still use it: pr-0");
    // Numaflow's default name.
    let default = |rv| {
        child(
            "InterStepBufferService",
            rv,
            "default",
            "recyclable",
            json!({}),
        )
    };
    let log = vec![on(Value::Null), default(1), default(1).deleted_at(4)];
    assert_one(&log, "unnamed means default", "still use it");
    // Once the pipeline is gone, or on another service: clean.
    let log = vec![
        on(json!("default-0")),
        isb(1),
        on(json!("default-0")).deleted_at(3),
        isb(1).deleted_at(4),
    ];
    let v: Vec<String> = violations(&log)
        .into_iter()
        .filter(|v| v.contains("InterStepBufferService"))
        .collect();
    assert!(v.is_empty(), "{v:#?}");
    let log = vec![on(json!("default-1")), isb(1), isb(1).deleted_at(3)];
    assert_clean(&log, "another service");
}

// Whether a pipeline may hold data is read from its recorded versions, not only from the
// operator's `requires-drain` marking.
#[test]
fn a_pipeline_that_ran_may_hold_data_without_the_operators_marking() {
    let ran = merged(running(), &json!({"metadata": {"annotations": null}}));
    let p = pipeline(2, "pr-0", "recyclable", ran);
    assert_one(
        &[rollout(1, json!({})), p.clone(), p.deleted_at(3)],
        "ran",
        "may hold data",
    );
    // Never let data in (paused from the start): nothing to drain.
    let paused = json!({"spec": {"lifecycle": {"desiredPhase": "Paused"},
        "vertices": [{"name": "in", "source": {"generator": {}}}]}, "status": {"phase": "Paused"}});
    let p = pipeline(2, "pr-0", "recyclable", paused);
    assert_clean(
        &[rollout(1, json!({})), p.clone(), p.deleted_at(3)],
        "never ran",
    );
}

#[test]
fn at_most_one_trial_per_rollout() {
    let log = vec![
        rollout(1, json!({})),
        pipeline(2, "pr-1", "trial", json!({})),
        pipeline(3, "pr-2", "trial", json!({})),
    ];
    assert_one(&log, "two trials", "2 trials at once");
    // The older one's next version came from a relist (its promotion in between unseen): its
    // state at rv 3 is unknown, so the moment is not judged, neither passed nor failed.
    let mut relisted = pipeline(4, "pr-1", "promoted", json!({}));
    relisted.after_gap = true;
    let log = vec![
        rollout(1, json!({})),
        pipeline(2, "pr-1", "trial", json!({})),
        pipeline(3, "pr-2", "trial", json!({})),
        relisted.clone(),
    ];
    let v = run(&log, &[], &Rules::default());
    assert!(v.violations.is_empty(), "{:#?}", v.violations);
    assert_eq!(v.unjudged.len(), 1, "{:#?}", v.unjudged);
    // A version seen by the watch itself is no excuse.
    relisted.after_gap = false;
    let log = vec![
        rollout(1, json!({})),
        pipeline(2, "pr-1", "trial", json!({})),
        pipeline(3, "pr-2", "trial", json!({})),
        relisted,
    ];
    assert_one(&log, "two trials, history complete", "2 trials at once");
}

#[test]
fn a_promoted_child_is_not_deleted_while_promoted() {
    let m = |rv| child("MonoVertex", rv, "mvr-0", "promoted", json!({}));
    let mvr = Seen::new(
        1,
        "MonoVertexRollout",
        json!({"metadata": {"name": "pr", "uid": PR_UID}}),
    );
    assert_one(
        &[mvr.clone(), m(2), m(2).deleted_at(3)],
        "promoted deleted",
        "still promoted",
    );
    // Deleted by the test itself (by uid).
    let rules = Rules {
        by_test: ["uid-mvr-0".to_string()].into(),
        ..Rules::default()
    };
    let log = [mvr, m(2), m(2).deleted_at(3)];
    assert!(run(&log, &[], &rules).violations.is_empty());
}

// A vanished object leaves the live set after its last version; a vanished pipeline that may
// hold data cannot be judged: a violation, or with gaps the test made itself, counted apart.
#[test]
fn vanished_objects() {
    let log = vec![
        rollout(1, json!({})),
        pipeline(2, "pr-0", "promoted", json!({})),
        pipeline(3, "pr-1", "trial", json!({})),
        pipeline(3, "pr-1", "trial", json!({})).vanished(),
        pipeline(2, "pr-0", "promoted", json!({})).vanished(),
        pipeline(5, "pr-2", "trial", json!({})),
        pipeline(6, "pr-2", "promoted", json!({})),
    ];
    assert_clean(&log, "vanished, then a new trial promoted");
    let p = pipeline(2, "pr-0", "recyclable", running());
    let log = vec![rollout(1, json!({})), p.clone(), p.vanished()];
    assert_one(&log, "vanished undrained", "vanished during a relist");
    let rules = Rules {
        history_may_have_gaps: true,
        ..Rules::default()
    };
    let v = run(&log, &[], &rules);
    assert!(v.violations.is_empty() && v.unjudged.len() == 1, "{v:#?}");
    let p = pipeline(2, "pr-0", "recyclable", drained());
    assert_clean(
        &[rollout(1, json!({})), p.clone(), p.vanished()],
        "vanished drained",
    );
}

// Pause-and-drain: a change while Running is caught, pausing is no change, one while Paused
// is fine.
#[test]
fn pipeline_changes_under_pause_and_drain() {
    let ppnd = rollout(
        1,
        json!({"status": {"upgradeInProgress": "PipelinePauseAndDrain"}}),
    );
    let running = pipeline(
        3,
        "pr-0",
        "promoted",
        json!({"spec": {"vertices": [{"name": "in"}]}, "status": {"phase": "Running"}}),
    );
    let mut changed = running.clone();
    changed.rv = 4;
    changed.obj["spec"]["vertices"][0]["udf"] = json!({});
    assert_one(
        &[ppnd.clone(), running.clone(), changed.clone()],
        "changed while running",
        "changed under pause-and-drain",
    );
    let mut scaled = running.clone();
    scaled.rv = 4;
    scaled.obj["spec"]["vertices"][0]["scale"] = json!({"min": 0});
    scaled.obj["spec"]["lifecycle"] = json!({"desiredPhase": "Paused"});
    assert_clean(
        &[ppnd.clone(), running.clone(), scaled],
        "pausing is not a change",
    );
    let mut paused = running;
    paused.obj["status"]["phase"] = json!("Paused");
    assert_clean(&[ppnd, paused, changed], "changed while paused");
}

#[test]
fn a_rollout_that_does_not_converge_is_caught() {
    let mut r = rollout(1, json!({"metadata": {"generation": 2}}));
    r.at = Instant::now()
        .checked_sub(Duration::from_secs(10))
        .unwrap_or_else(Instant::now);
    let v = judge(
        &[r],
        &[],
        &Rules::default(),
        Instant::now(),
        Duration::from_secs(5),
    );
    assert_eq!(v.violations.len(), 1, "{v:#?}");
    assert!(v.violations[0].contains("not converged"));
}

// An undrained deletion whose last recorded version and deletion were recorded either side of a
// control-plane restart is not judged: the watch was seen to miss versions there (one the
// operator acted on). Away from a restart, the same history is a violation.
#[test]
fn a_deletion_across_a_control_plane_restart_is_not_judged() {
    let recycled = merged(
        running(),
        &json!({"metadata": {"labels": {labels::UPGRADE_STATE: "recyclable"}}}),
    );
    let mut before = pipeline(2, "pr-0", "recyclable", recycled.clone());
    let mut deleted = pipeline(2, "pr-0", "recyclable", recycled).deleted_at(3);
    let t0 = Instant::now();
    before.at = t0;
    deleted.at = t0 + Duration::from_secs(4);
    let log = vec![rollout(1, json!({})), before, deleted];
    assert_eq!(violations(&log).len(), 1, "no restart: judged");
    let rules = Rules {
        restarts: vec![(t0 + Duration::from_secs(1), t0 + Duration::from_secs(2))],
        ..Rules::default()
    };
    let v = run(&log, &[], &rules);
    assert!(v.violations.is_empty(), "{:#?}", v.violations);
    assert_eq!(
        v.unjudged.len(),
        1,
        "reported as not judged: {:#?}",
        v.unjudged
    );
    // A restart long before both versions changes nothing.
    let rules = Rules {
        restarts: vec![(t0 - Duration::from_secs(60), t0 - Duration::from_secs(59))],
        ..Rules::default()
    };
    assert_eq!(run(&log, &[], &rules).violations.len(), 1, "an old restart");
}

// A PipelineRollout being deleted drains its pipelines first: an undrained deletion passes
// only on the rollout's allow-data-loss or once the configured drain timeout since the
// rollout's recorded deletion is over (an earlier checker passed every child of a deleted
// rollout).
#[test]
fn a_deleted_rollouts_pipelines_go_drained_or_with_a_visible_allowance() {
    let t0 = "2026-01-01T00:00:00Z";
    let deleting = |extra: Value| {
        rollout(
            3,
            merged(json!({"metadata": {"deletionTimestamp": t0}}), &extra),
        )
    };
    let history = |rollout_deleting: Seen, last: Value, at: &str| {
        let last = pipeline(4, "pr-0", "promoted", last);
        let mut gone = last.clone().deleted_at(5);
        gone.obj["metadata"]["deletionTimestamp"] = json!(at);
        vec![rollout(1, json!({})), rollout_deleting, last, gone]
    };
    let timeout = Rules {
        deletion_drain_timeout: vec![(k8s_openapi::jiff::Timestamp::MIN, Duration::from_secs(300))],
        ..Rules::default()
    };
    let check = |log: &[Seen], rules: &Rules| run(log, &[], rules).violations;

    let early = history(deleting(json!({})), running(), "2026-01-01T00:00:10Z");
    let v = check(&early, &timeout);
    assert_eq!(v.len(), 1, "{v:#?}");
    assert!(v[0].contains("not over"), "{v:#?}");
    let v = check(&early, &Rules::default());
    assert!(
        v.len() == 1 && v[0].contains("deletionDrainTimeoutSeconds is unknown"),
        "{v:#?}"
    );
    // The timeout over, the rollout allowing data loss, or the pipeline drained: clean.
    let late = history(deleting(json!({})), running(), "2026-01-01T00:05:01Z");
    assert!(
        check(&late, &timeout).is_empty(),
        "{:#?}",
        check(&late, &timeout)
    );
    let allowing = json!({"metadata": {"annotations": {annotations::ALLOW_DATA_LOSS: "true"}}});
    let allowed = history(deleting(allowing), running(), "2026-01-01T00:00:10Z");
    assert!(check(&allowed, &timeout).is_empty());
    let drained_first = history(deleting(json!({})), drained(), "2026-01-01T00:00:10Z");
    assert!(check(&drained_first, &timeout).is_empty());
}

// An ISB service stays while pipelines use it, also when its ISBServiceRollout is being
// deleted (an earlier checker did not look then).
#[test]
fn an_isbsvc_of_a_deleted_rollout_deleted_under_a_live_pipeline_is_caught() {
    let isbr = Seen::new(
        1,
        "ISBServiceRollout",
        json!({"metadata": {"name": "isb", "uid": "uid-isbr", "generation": 1,
            "deletionTimestamp": "2026-01-01T00:00:00Z"}}),
    );
    let owned = json!({"metadata": {"ownerReferences": [
        {"kind": "ISBServiceRollout", "name": "isb", "uid": "uid-isbr", "controller": true}
    ]}});
    let isb = |rv| {
        child(
            "InterStepBufferService",
            rv,
            "isb-0",
            "promoted",
            owned.clone(),
        )
    };
    let user = pipeline(
        2,
        "pr-0",
        "promoted",
        json!({"spec": {"interStepBufferServiceName": "isb-0"}}),
    );
    let log = vec![isbr, user, isb(3), isb(3).deleted_at(4)];
    assert_one(
        &log,
        "its rollout deleted, a pipeline on it",
        "still use it: pr-0",
    );
}
