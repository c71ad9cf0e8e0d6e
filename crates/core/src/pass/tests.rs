//! Examples of each decision of a pass.

use super::*;
use crate::config::SpecField;
use numaplane_api::keys::annotations::NUMAFLOW_INSTANCE;
use serde_json::json;

/// An observed child, owned, so tests can build views of it.
#[derive(Debug, Clone)]
pub(super) struct Child {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub spec: Value,
    pub deleting: bool,
    pub created: i64,
    pub controlled: bool,
}

impl Child {
    pub fn new(name: &str, state: &str, created: i64, spec: Value) -> Child {
        Child {
            name: name.into(),
            labels: [
                (labels::PARENT_ROLLOUT_NAME.to_string(), "r".to_string()),
                (labels::UPGRADE_STATE.to_string(), state.to_string()),
            ]
            .into(),
            annotations: BTreeMap::new(),
            spec,
            deleting: false,
            created,
            controlled: true,
        }
    }

    pub fn view(&self) -> ChildView<'_, String> {
        ChildView {
            handle: self.name.clone(),
            name: &self.name,
            labels: &self.labels,
            annotations: &self.annotations,
            spec: &self.spec,
            deleting: self.deleting,
            created: Timestamp::from_second(self.created).ok(),
            controlled: self.controlled,
        }
    }
}

pub(super) fn views(children: &[Child]) -> Vec<ChildView<'_, String>> {
    children.iter().map(Child::view).collect()
}

/// The desired child, owned, handed back in an update.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Want {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub spec: Value,
}

impl Want {
    pub fn new(spec: &Value) -> Want {
        Want {
            labels: desired_labels(),
            annotations: BTreeMap::new(),
            spec: spec.clone(),
        }
    }
}

impl Desired for Want {
    fn view(&self) -> DesiredView<'_> {
        DesiredView {
            labels: &self.labels,
            annotations: &self.annotations,
            spec: &self.spec,
        }
    }
}

/// The plan's types in these tests: children named by their names, no resolution.
pub(super) type In<'a> = PassInput<'a, String, Want, ()>;
pub(super) type TestPlan = Plan<String, Want, ()>;
pub(super) type TestStep = PromotedStep<String, Want, ()>;

pub(super) fn desired_labels() -> BTreeMap<String, String> {
    [
        (labels::PARENT_ROLLOUT_NAME.to_string(), "r".to_string()),
        (
            labels::UPGRADE_STATE.to_string(),
            upgrade_state::PROMOTED.to_string(),
        ),
    ]
    .into()
}

/// The plan's step for the promoted child (the examples all plan one).
pub(super) fn step(p: &TestPlan) -> &TestStep {
    p.promoted.as_ref().expect("a step for the promoted child")
}

pub(super) fn input<'a>(
    cached: &'a [ChildView<'a, String>],
    promoted: Promoted<'a, String, Want, ()>,
) -> In<'a> {
    PassInput {
        rollout: "r",
        child_kind: "Pipeline",
        cached,
        duplicates_live: None,
        retire: &[],
        promoted,
        generation_changed: false,
        in_progress: UpgradeStrategy::NoOp,
        name_count: None,
        user_strategy: UserStrategy::NoStrategy,
        progressive: None,
        riders: &[],
        spec_path: "spec.pipeline.spec",
    }
}

fn cached_promoted<'a>(child: &'a Child, spec: &Value) -> Promoted<'a, String, Want, ()> {
    Promoted::Cached {
        child: child.view(),
        desired: Want::new(spec),
        resolved: (),
    }
}

#[test]
fn a_retirement_ends_the_pass_before_anything_is_recycled() {
    let children = [Child::new("r-0", upgrade_state::RECYCLABLE, 1, json!({}))];
    let cached = views(&children);
    let retire = [Retirement {
        child: "r-1".into(),
        reason: upgrade_state_reason::DELETE_RECREATE.into(),
        why: "r-1 (InterStepBufferService isb-0 is delete-recreate)".into(),
    }];
    let mut i = input(&cached, Promoted::Recreating { old: "r-0" });
    i.retire = &retire;
    let p = plan(i);
    assert_eq!(p.retire, vec![("r-1".into(), "delete-recreate".into())]);
    assert!(p.recycle.is_empty());
    assert_eq!(
        *step(&p),
        PromotedStep::Wait(
            "retiring pipelines r-1 (InterStepBufferService isb-0 is delete-recreate)".into()
        )
    );
}

#[test]
fn duplicates_are_purged_only_when_the_live_list_confirms_them() {
    let spec = json!({"a": 1});
    let children = [
        Child::new("r-0", upgrade_state::PROMOTED, 1, spec.clone()),
        Child::new("r-1", upgrade_state::PROMOTED, 2, spec.clone()),
    ];
    let cached = views(&children);
    let names: Vec<&str> = duplicates(&cached).iter().map(|c| c.name).collect();
    assert_eq!(names, vec!["r-0"]);
    // The live list shows r-0 already relabelled: nothing to purge.
    let mut relabelled = children.clone();
    relabelled[0].labels.insert(
        labels::UPGRADE_STATE.into(),
        upgrade_state::RECYCLABLE.into(),
    );
    let live = views(&relabelled);
    let mut i = input(&cached, cached_promoted(&children[1], &spec));
    i.duplicates_live = Some(&live);
    assert!(plan(i.clone()).retire.is_empty());
    let live = views(&children);
    i.duplicates_live = Some(&live);
    let p = plan(i);
    assert_eq!(p.retire, vec![("r-0".into(), "purge".into())]);
    assert_eq!(*step(&p), PromotedStep::InSync("r-1".into()));
}

#[test]
fn someone_elses_child_is_never_a_duplicate_of_ours() {
    let mut foreign = Child::new("r-0", upgrade_state::PROMOTED, 5, json!({}));
    foreign.controlled = false;
    let children = [
        foreign,
        Child::new("r-1", upgrade_state::PROMOTED, 2, json!({})),
    ];
    assert!(duplicates(&views(&children)).is_empty());
}

#[test]
fn recyclable_children_not_yet_deleting_get_a_step() {
    let mut gone = Child::new("r-1", upgrade_state::RECYCLABLE, 2, json!({}));
    gone.deleting = true;
    let children = [
        Child::new("r-0", upgrade_state::RECYCLABLE, 1, json!({})),
        gone,
    ];
    let cached = views(&children);
    let i = input(
        &cached,
        Promoted::Waiting("waiting for ISBServiceRollout default"),
    );
    let p = plan(i);
    assert_eq!(p.recycle, vec!["r-0".to_string()]);
    assert_eq!(
        *step(&p),
        PromotedStep::Wait("waiting for ISBServiceRollout default".into())
    );
}

#[test]
fn a_recreate_waits_for_the_old_child() {
    let mut old = Child::new("r-0", upgrade_state::RECYCLABLE, 1, json!({}));
    old.labels.insert(
        labels::UPGRADE_STATE_REASON.into(),
        upgrade_state_reason::DELETE_RECREATE.into(),
    );
    let children = [old];
    let cached = views(&children);
    assert_eq!(recreating(&cached), Some("r-0"));
    assert_eq!(newest_promoted(&cached).map(|c| c.name), None);
    let p = plan(input(&cached, Promoted::Recreating { old: "r-0" }));
    assert_eq!(
        *step(&p),
        PromotedStep::Wait(
            "recreate: waiting for Pipeline r-0 to be deleted before creating its replacement"
                .into()
        )
    );
}

#[test]
fn a_promoted_child_only_the_live_list_shows_is_adopted() {
    let mut deleting = Child::new("r-0", upgrade_state::PROMOTED, 1, json!({}));
    deleting.deleting = true;
    let children = [
        deleting,
        Child::new("r-1", upgrade_state::PROMOTED, 2, json!({})),
    ];
    let live = views(&children);
    let p = plan(input(&[], Promoted::Missing { live, resolved: () }));
    assert_eq!(*step(&p), PromotedStep::Adopt("r-1".into()));
}

#[test]
fn a_create_takes_the_next_free_name_and_discontinues_orphaned_trials() {
    let children = [
        Child::new("r-3", upgrade_state::TRIAL, 1, json!({})),
        Child::new("r-4", upgrade_state::IN_PROGRESS, 2, json!({})),
        Child::new("r-5", upgrade_state::RECYCLABLE, 3, json!({})),
    ];
    let live = views(&children);
    let mut i = input(&[], Promoted::Missing { live, resolved: () });
    i.name_count = Some(3);
    let p = plan(i);
    assert_eq!(
        *step(&p),
        PromotedStep::Create {
            resolved: (),
            name: "r-6".into(),
            name_count: 7,
            discontinue: vec!["r-3".into(), "r-4".into()],
        }
    );
}

#[test]
fn no_free_name_is_an_error() {
    let children: Vec<Child> = (0..1000)
        .map(|n| Child::new(&format!("r-{n}"), upgrade_state::RECYCLABLE, n, json!({})))
        .collect();
    let live = views(&children);
    let err = plan(input(&[], Promoted::Missing { live, resolved: () }))
        .promoted
        .expect_err("all names taken");
    assert_eq!(err, PlanError::NoFreeName("r".into()));
}

#[test]
fn an_unchanged_child_is_in_sync_unless_the_rollout_changed_or_a_strategy_runs() {
    let spec = json!({"vertices": [{"name": "in", "scale": {"min": 1}}]});
    let child = Child::new(
        "r-0",
        upgrade_state::PROMOTED,
        1,
        json!({"vertices": [{"name": "in", "scale": {"min": 1.0}}]}),
    );
    let mut i = input(&[], cached_promoted(&child, &spec));
    assert_eq!(*step(&plan(i.clone())), PromotedStep::InSync("r-0".into()));
    i.generation_changed = true;
    assert_eq!(
        *step(&plan(i.clone())),
        PromotedStep::Update {
            live: "r-0".into(),
            desired: Want::new(&spec),
            resolved: (),
            progressive: false,
            riders_progressive: false,
            changed_fields: vec![],
        }
    );
    i.generation_changed = false;
    i.in_progress = UpgradeStrategy::PipelinePauseAndDrain;
    assert!(matches!(
        *step(&plan(i)),
        PromotedStep::Update {
            progressive: false,
            ..
        }
    ));
}

#[test]
fn a_child_we_do_not_control_or_missing_a_label_differs() {
    let spec = json!({});
    let (labels, empty) = (desired_labels(), BTreeMap::new());
    let desired = DesiredView {
        labels: &labels,
        annotations: &empty,
        spec: &spec,
    };
    let mut child = Child::new("r-0", upgrade_state::PROMOTED, 1, json!({}));
    assert!(!differs(&child.view(), &desired));
    child.labels.insert("extra".into(), "kept".into());
    assert!(!differs(&child.view(), &desired), "labels others add stay");
    child.controlled = false;
    assert!(differs(&child.view(), &desired));
    child.controlled = true;
    child.labels.remove(labels::PARENT_ROLLOUT_NAME);
    assert!(differs(&child.view(), &desired));
}

#[test]
fn the_numaflow_instance_compares_absent_and_empty_alike() {
    let spec = json!({});
    let labels = desired_labels();
    let on = |v: &str| BTreeMap::from([(NUMAFLOW_INSTANCE.to_string(), v.to_string())]);
    let child = Child::new("r-0", upgrade_state::PROMOTED, 1, json!({}));
    let (empty, trial) = (on(""), on("1"));
    let want = |annotations| DesiredView {
        labels: &labels,
        annotations,
        spec: &spec,
    };
    assert!(!differs(&child.view(), &want(&empty)), "absent is \"\"");
    assert!(differs(&child.view(), &want(&trial)));
    let mut moved = child.clone();
    moved.annotations = on("1");
    assert!(!differs(&moved.view(), &want(&trial)));
    assert!(differs(&moved.view(), &want(&empty)), "back to no instance");
}

#[test]
fn a_change_goes_progressive_only_when_classified_so_under_the_progressive_strategy() {
    let spec = json!({"vertices": [{"name": "in", "image": "b"}]});
    let child = Child::new(
        "r-0",
        upgrade_state::PROMOTED,
        1,
        json!({"vertices": [{"name": "in", "image": "a"}]}),
    );
    let usde = UsdeKindConfig {
        progressive: vec![SpecField {
            path: "spec.vertices".into(),
            include_subfields: true,
        }],
        ..Default::default()
    };
    let mut i = input(&[], cached_promoted(&child, &spec));
    i.progressive = Some(ProgressiveView {
        kind: Kind::Pipeline,
        usde: Some(&usde),
    });
    let progressive = |i: &In<'_>| match step(&plan(i.clone())).clone() {
        PromotedStep::Update { progressive, .. } => progressive,
        other => panic!("expected an update, got {other:?}"),
    };
    assert!(!progressive(&i), "not under the progressive user strategy");
    i.user_strategy = UserStrategy::Progressive;
    assert!(progressive(&i));
    i.progressive = Some(ProgressiveView {
        kind: Kind::Pipeline,
        usde: None,
    });
    // Fail closed: with no USDE config every change may lose data.
    assert!(
        progressive(&i),
        "no USDE config: progressive, not a direct apply"
    );
    i.in_progress = UpgradeStrategy::Progressive;
    assert!(progressive(&i), "an upgrade in progress keeps going");
    match step(&plan(i)).clone() {
        PromotedStep::Update { changed_fields, .. } => {
            assert_eq!(changed_fields, vec!["spec.pipeline.spec.vertices[0].image"])
        }
        other => panic!("expected an update, got {other:?}"),
    }
}

#[test]
fn a_modified_progressive_rider_is_reported() {
    let spec = json!({});
    let child = Child::new("r-0", upgrade_state::PROMOTED, 1, json!({}));
    let riders = [RiderChange {
        kind: "ConfigMap".into(),
        name: "cm".into(),
        change: RiderChangeKind::Modified { progressive: true },
    }];
    let mut i = input(&[], cached_promoted(&child, &spec));
    i.generation_changed = true;
    i.riders = &riders;
    match step(&plan(i)).clone() {
        PromotedStep::Update {
            riders_progressive,
            changed_fields,
            ..
        } => {
            assert!(riders_progressive);
            assert_eq!(changed_fields, vec!["spec.riders"]);
        }
        other => panic!("expected an update, got {other:?}"),
    }
}
