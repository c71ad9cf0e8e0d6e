use super::*;
use UpgradeStrategy::{NoOp, PipelinePauseAndDrain as Ppnd, Progressive};
use serde_json::json;

fn at(s: i64) -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(1_800_000_000 + s).unwrap())
}

fn trial(name: &str, result: Option<AssessmentResult>) -> UpgradingChildStatus {
    UpgradingChildStatus {
        name: name.into(),
        assessment_result: result,
        ..Default::default()
    }
}

fn obs<'a>(before: UpgradeStrategy, after: UpgradeStrategy) -> Observation<'a> {
    Observation {
        strategy_before: before,
        strategy_after: after,
        promoted: Some("p-0"),
        generation: 2,
        ..Default::default()
    }
}

fn outcomes(h: &[UpgradeRecord]) -> Vec<(String, Option<UpgradeOutcome>)> {
    h.iter().map(|r| (r.child.clone(), r.outcome)).collect()
}

/// The pass that records trial `name` (assessment Unknown) at `t`.
fn start_trial(h: &mut Vec<UpgradeRecord>, name: &str, t: i64) {
    let running = trial(name, Some(AssessmentResult::Unknown));
    let o = Observation {
        trial: Some(&running),
        ..obs(NoOp, Progressive)
    };
    record(h, &o, &at(t), 10);
}

#[test]
fn a_created_child_and_a_direct_update_are_one_closed_attempt_each() {
    let mut h = Vec::new();
    let fields = vec!["spec.pipeline.spec.vertices[0].udf.container.image".to_string()];
    record(
        &mut h,
        &Observation {
            created: true,
            ..obs(NoOp, NoOp)
        },
        &at(0),
        10,
    );
    let applied = Observation {
        applied: true,
        changed_fields: &fields,
        generation: 3,
        ..obs(NoOp, NoOp)
    };
    record(&mut h, &applied, &at(5), 10);
    assert_eq!(
        outcomes(&h),
        vec![
            ("p-0".into(), Some(UpgradeOutcome::Created)),
            ("p-0".into(), Some(UpgradeOutcome::AppliedDirectly)),
        ]
    );
    let r = &h[1];
    assert_eq!(r.strategy, UpgradeStrategy::DirectApply);
    assert_eq!(r.generation, 3);
    assert_eq!(
        (r.start_time.clone(), r.end_time.clone()),
        (at(5), Some(at(5)))
    );
    assert_eq!(r.changed_fields, fields);
    // A pass that changed nothing adds nothing, nor does a drift put right in the same
    // generation.
    record(&mut h, &obs(NoOp, NoOp), &at(9), 10);
    record(&mut h, &applied, &at(12), 10);
    assert_eq!(h.len(), 2);
}

#[test]
fn a_trial_opens_when_named_and_closes_once_when_promoted() {
    let mut h = Vec::new();
    let running = trial("p-1", Some(AssessmentResult::Unknown));
    let o = Observation {
        trial: Some(&running),
        ..obs(NoOp, Progressive)
    };
    record(&mut h, &o, &at(0), 10);
    record(&mut h, &o, &at(3), 10);
    assert_eq!(outcomes(&h), vec![("p-1".into(), None)]);
    assert_eq!(h[0].previous_child, "p-0");
    assert_eq!(h[0].start_time, at(0));
    assert_eq!(h[0].strategy, Progressive);

    let done = trial("p-1", Some(AssessmentResult::Success));
    let o = Observation {
        trial: Some(&done),
        promoted: Some("p-1"),
        ..obs(Progressive, NoOp)
    };
    record(&mut h, &o, &at(60), 10);
    // Idle passes keep showing the trial's success: nothing more is recorded.
    let idle = Observation {
        trial: Some(&done),
        promoted: Some("p-1"),
        ..obs(NoOp, NoOp)
    };
    record(&mut h, &idle, &at(90), 10);
    assert_eq!(
        outcomes(&h),
        vec![("p-1".into(), Some(UpgradeOutcome::Promoted))]
    );
    assert_eq!(h[0].end_time, Some(at(60)));
    assert!(h[0].reasons.is_empty());
}

#[test]
fn a_failed_trial_keeps_its_reasons_and_a_later_force_promote_wins() {
    let mut h = Vec::new();
    start_trial(&mut h, "p-1", 0);
    let mut failed = trial("p-1", Some(AssessmentResult::Failure));
    failed.failure_reasons = vec!["vertex cat is not healthy".into()];
    let o = Observation {
        trial: Some(&failed),
        ..obs(Progressive, Progressive)
    };
    record(&mut h, &o, &at(30), 10);
    record(&mut h, &o, &at(40), 10);
    assert_eq!(
        outcomes(&h),
        vec![("p-1".into(), Some(UpgradeOutcome::Failed))]
    );
    assert_eq!(h[0].reasons, vec!["vertex cat is not healthy".to_string()]);
    assert_eq!(h[0].end_time, Some(at(30)));

    let mut forced = trial("p-1", Some(AssessmentResult::Success));
    forced.forced_success = true;
    forced.forced_success_reason = Some(ForcedSuccessReason::ForcePromote);
    let o = Observation {
        trial: Some(&forced),
        promoted: Some("p-1"),
        ..obs(Progressive, NoOp)
    };
    record(&mut h, &o, &at(50), 10);
    record(&mut h, &o, &at(55), 10);
    assert_eq!(
        outcomes(&h),
        vec![("p-1".into(), Some(UpgradeOutcome::ForcePromoted))]
    );
    assert_eq!(
        h[0].reasons,
        vec![
            "vertex cat is not healthy".to_string(),
            "promoted without assessment: force-promote label on the trial".to_string()
        ]
    );
    assert_eq!(h[0].end_time, Some(at(50)));
}

#[test]
fn a_new_trial_replaces_the_running_one() {
    let mut h = Vec::new();
    for (name, t) in [("p-1", 0), ("p-2", 10)] {
        let running = trial(name, Some(AssessmentResult::Unknown));
        record(
            &mut h,
            &Observation {
                trial: Some(&running),
                ..obs(Progressive, Progressive)
            },
            &at(t),
            10,
        );
    }
    assert_eq!(
        outcomes(&h),
        vec![
            ("p-1".into(), Some(UpgradeOutcome::Replaced)),
            ("p-2".into(), None)
        ]
    );
    assert_eq!(h[0].end_time, Some(at(10)));
}

#[test]
fn a_discontinued_trial_is_rolled_back_or_discontinued_by_what_stays_promoted() {
    let mut running = trial("p-1", Some(AssessmentResult::Unknown));
    for (promoted_after, want) in [
        ("p-0", UpgradeOutcome::RolledBack),
        ("p-2", UpgradeOutcome::Discontinued),
    ] {
        let mut h = Vec::new();
        running.discontinued = false;
        record(
            &mut h,
            &Observation {
                trial: Some(&running),
                ..obs(NoOp, Progressive)
            },
            &at(0),
            10,
        );
        running.discontinued = true;
        record(
            &mut h,
            &Observation {
                trial: Some(&running),
                promoted: Some(promoted_after),
                ..obs(Progressive, Progressive)
            },
            &at(7),
            10,
        );
        assert_eq!(outcomes(&h), vec![("p-1".into(), Some(want))]);
    }
}

#[test]
fn pause_and_drain_spans_the_strategy_and_its_final_apply_is_part_of_it() {
    let mut h = Vec::new();
    let fields = vec!["spec.pipeline.spec.vertices[1].udf".to_string()];
    record(
        &mut h,
        &Observation {
            changed_fields: &fields,
            ..obs(NoOp, Ppnd)
        },
        &at(0),
        10,
    );
    record(&mut h, &obs(Ppnd, Ppnd), &at(5), 10);
    assert_eq!(outcomes(&h), vec![("p-0".into(), None)]);
    record(
        &mut h,
        &Observation {
            applied: true,
            ..obs(Ppnd, NoOp)
        },
        &at(20),
        10,
    );
    assert_eq!(
        outcomes(&h),
        vec![("p-0".into(), Some(UpgradeOutcome::PausedAndDrained))]
    );
    assert_eq!(h[0].strategy, Ppnd);
    assert_eq!(h[0].changed_fields, fields);
    assert_eq!(h[0].end_time, Some(at(20)));
}

#[test]
fn the_history_keeps_the_newest_and_an_evicted_result_starts_nothing() {
    let mut h = Vec::new();
    let done = trial("p-1", Some(AssessmentResult::Success));
    for i in 0..5 {
        record(
            &mut h,
            &Observation {
                applied: true,
                generation: i,
                trial: Some(&done),
                ..obs(NoOp, NoOp)
            },
            &at(i),
            3,
        );
    }
    assert_eq!(
        h.iter().map(|r| r.generation).collect::<Vec<_>>(),
        vec![2, 3, 4]
    );
    record(&mut h, &obs(NoOp, NoOp), &at(9), 0);
    assert!(h.is_empty());
}

#[test]
fn a_recreated_child_ends_a_trial_but_not_a_pause_and_drain() {
    let mut h = Vec::new();
    start_trial(&mut h, "p-1", 0);
    // The promoted child vanished: a new one is created and the trial dropped.
    let created = |promoted, after| Observation {
        created: true,
        promoted: Some(promoted),
        ..obs(Progressive, after)
    };
    record(&mut h, &created("p-2", NoOp), &at(4), 10);
    assert_eq!(
        outcomes(&h),
        vec![
            ("p-1".into(), Some(UpgradeOutcome::Discontinued)),
            ("p-2".into(), Some(UpgradeOutcome::Created)),
        ]
    );
    // A recreate during pause-and-drain stays that attempt, now on the new child.
    record(&mut h, &obs(NoOp, Ppnd), &at(10), 10);
    record(&mut h, &created("p-3", Ppnd), &at(12), 10);
    record(&mut h, &created("p-3", Ppnd), &at(13), 10);
    assert_eq!(h.len(), 3);
    assert_eq!(
        (h[2].child.as_str(), h[2].previous_child.as_str()),
        ("p-3", "p-0")
    );
    assert_eq!(h[2].outcome, None);
}

#[test]
fn long_and_many_reasons_are_bounded() {
    let mut h = Vec::new();
    start_trial(&mut h, "p-1", 0);
    let mut failed = trial("p-1", Some(AssessmentResult::Failure));
    failed.failure_reasons = (0..9).map(|i| format!("{i}{}", "é".repeat(900))).collect();
    record(
        &mut h,
        &Observation {
            trial: Some(&failed),
            ..obs(Progressive, Progressive)
        },
        &at(1),
        10,
    );
    assert_eq!(h[0].reasons.len(), MAX_REASONS);
    for r in &h[0].reasons {
        assert_eq!(r.chars().count(), MAX_REASON_CHARS + 1);
        assert!(r.ends_with('…'));
    }
}

#[test]
fn changed_fields_name_the_paths_that_differ() {
    let live = json!({
        "vertices": [
            {"name": "in", "source": {"generator": {"rpu": 5}}},
            {"name": "cat", "udf": {"container": {"image": "a:1"}}, "scale": null},
        ],
        "limits": {"readBatchSize": 100},
        "lifecycle": {"desiredPhase": "Running"},
    });
    let desired = json!({
        "vertices": [
            {"name": "in", "source": {"generator": {"rpu": 10}}},
            {"name": "cat", "udf": {"container": {"image": "a:2"}}},
        ],
        "limits": {"readBatchSize": 100, "bufferMaxLength": 9},
        "lifecycle": {"desiredPhase": "Running"},
        "x.y": 1,
    });
    assert_eq!(
        changed_fields("spec.pipeline.spec", &live, &desired),
        vec![
            "spec.pipeline.spec.limits.bufferMaxLength",
            "spec.pipeline.spec.vertices[0].source.generator.rpu",
            "spec.pipeline.spec.vertices[1].udf.container.image",
            "spec.pipeline.spec[\"x.y\"]",
        ]
    );
    // An array of another length is one change; equal specs none.
    let longer = json!({"vertices": [1, 2, 3]});
    assert_eq!(
        changed_fields("s", &json!({"vertices": [1, 2]}), &longer),
        vec!["s.vertices"]
    );
    assert!(changed_fields("s", &live, &live).is_empty());
}

#[test]
fn changed_fields_in_a_record_are_bounded() {
    let desired: serde_json::Map<String, Value> =
        (0..25).map(|i| (format!("f{i:02}"), json!(i))).collect();
    let fields = changed_fields("s", &json!({}), &Value::Object(desired));
    assert_eq!(fields.len(), 25);
    let mut h = Vec::new();
    let o = Observation {
        changed_fields: &fields,
        ..obs(NoOp, Ppnd)
    };
    record(&mut h, &o, &at(0), 10);
    let got = &h[0].changed_fields;
    assert_eq!(got.len(), MAX_CHANGED_FIELDS);
    let long = vec![format!("s.{}", "k".repeat(1000))];
    let mut h2 = Vec::new();
    let o2 = Observation {
        changed_fields: &long,
        ..obs(NoOp, Ppnd)
    };
    record(&mut h2, &o2, &at(0), 10);
    assert_eq!(h2[0].changed_fields[0].chars().count(), MAX_FIELD_CHARS + 1);
    assert_eq!(got[0], "s.f00");
    assert_eq!(got[MAX_CHANGED_FIELDS - 1], "… and 16 more");
}

#[test]
fn a_strategy_whose_start_was_not_recorded_is_opened_and_closed_all_the_same() {
    let mut h = Vec::new();
    // The pass that set pause-and-drain failed after writing it: the next one sees it set.
    record(&mut h, &obs(Ppnd, Ppnd), &at(0), 10);
    assert_eq!(outcomes(&h), vec![("p-0".into(), None)]);
    record(&mut h, &obs(Ppnd, NoOp), &at(8), 10);
    assert_eq!(
        outcomes(&h),
        vec![("p-0".into(), Some(UpgradeOutcome::PausedAndDrained))]
    );
    // A trial left open when progressive ends without a verdict is discontinued.
    let running = trial("p-1", Some(AssessmentResult::Unknown));
    record(
        &mut h,
        &Observation {
            trial: Some(&running),
            ..obs(NoOp, Progressive)
        },
        &at(10),
        10,
    );
    record(&mut h, &obs(Progressive, NoOp), &at(12), 10);
    assert_eq!(h[1].outcome, Some(UpgradeOutcome::Discontinued));
}

#[test]
fn finished_since_names_each_attempt_once_when_it_ends() {
    let mut h = Vec::new();
    let created = Observation {
        created: true,
        ..obs(NoOp, NoOp)
    };
    record(&mut h, &created, &at(0), 10);
    assert!(
        finished_since(&[], &h).is_empty(),
        "a first child is no upgrade"
    );
    start_trial(&mut h, "p-1", 10);
    let before = h.clone();
    let promoted = trial("p-1", Some(AssessmentResult::Success));
    let done = Observation {
        trial: Some(&promoted),
        ..obs(Progressive, NoOp)
    };
    record(&mut h, &done, &at(70), 10);
    let finished = finished_since(&before, &h);
    assert_eq!(finished.len(), 1, "{h:?}");
    assert_eq!(finished[0].0.strategy, Progressive);
    assert_eq!(finished[0].1, 60.0);
    // Seen again in a later pass: not counted twice.
    let after = h.clone();
    record(&mut h, &done, &at(80), 10);
    assert!(finished_since(&after, &h).is_empty());
}
