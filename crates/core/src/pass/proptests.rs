//! Property tests over random sets of children: a pass never leaves a rollout with two promoted
//! children of its own, never creates one while the live list shows one, and is idempotent:
//! planning again from the state its plan produced (the cache caught up) changes nothing.

use super::tests::{Child, TestPlan, Want, desired_labels, input, step, views};
use super::*;
use proptest::prelude::*;
use serde_json::json;

const STATES: [&str; 4] = [
    upgrade_state::PROMOTED,
    upgrade_state::TRIAL,
    upgrade_state::IN_PROGRESS,
    upgrade_state::RECYCLABLE,
];

fn child() -> impl Strategy<Value = (usize, i64, bool, bool, u8)> {
    (
        0..STATES.len(),
        0i64..5,
        any::<bool>(),
        any::<bool>(),
        0u8..2,
    )
}

fn world(spec: &[(usize, i64, bool, bool, u8)]) -> Vec<Child> {
    spec.iter()
        .enumerate()
        .map(|(i, &(state, created, deleting, controlled, version))| {
            let mut c = Child::new(
                &format!("r-{i}"),
                STATES[state],
                created,
                json!({"v": version}),
            );
            c.deleting = deleting;
            c.controlled = controlled || STATES[state] != upgrade_state::PROMOTED;
            c
        })
        .collect()
}

/// Plans one pass over `world` (cache and live list agree) with the rollout asking for spec
/// `{"v": want}`.
fn plan_over(world: &[Child], name_count: Option<i32>, want: &Value) -> TestPlan {
    let cached = views(world);
    let promoted = match (newest_promoted(&cached), recreating(&cached)) {
        (Some(c), _) => Promoted::Cached {
            child: c.clone(),
            desired: Want::new(want),
            resolved: (),
        },
        (None, Some(old)) => Promoted::Recreating { old },
        (None, None) => Promoted::Missing {
            live: cached.clone(),
            resolved: (),
        },
    };
    let mut i = input(&cached, promoted);
    i.duplicates_live = Some(&cached);
    i.name_count = name_count;
    plan(i)
}

/// Carries `plan` out on `world` as the controller would (recycled children deleted, a direct
/// update applied); returns the new `nameCount`.
fn carry_out(
    world: &mut Vec<Child>,
    plan: &TestPlan,
    want: &Value,
    name_count: Option<i32>,
) -> Option<i32> {
    let mark = |world: &mut Vec<Child>, name: &str, reason: &str| {
        if let Some(c) = world.iter_mut().find(|c| c.name == name) {
            c.labels.insert(
                labels::UPGRADE_STATE.into(),
                upgrade_state::RECYCLABLE.into(),
            );
            c.labels
                .insert(labels::UPGRADE_STATE_REASON.into(), reason.into());
        }
    };
    for (name, reason) in &plan.retire {
        mark(world, name, reason);
    }
    world.retain(|c| !plan.recycle.contains(&c.name));
    match step(plan) {
        PromotedStep::Create {
            name,
            name_count,
            discontinue,
            ..
        } => {
            for t in discontinue {
                mark(world, t, upgrade_state_reason::DISCONTINUE_PROGRESSIVE);
            }
            world.push(Child::new(name, upgrade_state::PROMOTED, 10, want.clone()));
            Some(*name_count)
        }
        PromotedStep::Update { .. } => {
            let cached = views(world);
            let newest = newest_promoted(&cached).map(|c| c.name.to_string());
            if let Some(c) = world.iter_mut().find(|c| Some(&c.name) == newest.as_ref()) {
                c.spec = want.clone();
                c.controlled = true;
                c.labels.extend(desired_labels());
            }
            name_count
        }
        _ => name_count,
    }
}

fn promoted_of_ours(world: &[Child]) -> usize {
    world
        .iter()
        .filter(|c| {
            c.controlled
                && !c.deleting
                && c.labels.get(labels::UPGRADE_STATE).map(String::as_str)
                    == Some(upgrade_state::PROMOTED)
        })
        .count()
}

proptest! {
    #[test]
    fn a_pass_leaves_one_promoted_child_and_a_second_pass_has_nothing_to_do(
        spec in prop::collection::vec(child(), 0..6),
        want in 0u8..2,
        name_count in prop::option::of(0i32..8),
    ) {
        let want = json!({"v": want});
        let mut world = world(&spec);
        let before = promoted_of_ours(&world);
        let first = plan_over(&world, name_count, &want);
        let cached = views(&world);
        if newest_promoted(&cached).is_some_and(|c| !c.controlled) {
            // Someone else's object carries our labels: the controller refuses it (NotOwned)
            // once the plan reaches it, and touches nothing.
            prop_assert!(matches!(*step(&first), PromotedStep::Update { .. }), "{:?}", first);
            return Ok(());
        }
        if let PromotedStep::Create { .. } = *step(&first) {
            prop_assert_eq!(before, 0, "created beside a promoted child: {:?}", world);
        }
        let name_count = carry_out(&mut world, &first, &want, name_count);
        let after = promoted_of_ours(&world);
        // A recreate waits for its old child; anything else ends with exactly one.
        let waiting = matches!(*step(&first), PromotedStep::Wait(_));
        prop_assert!(after <= 1, "two promoted children after {:?}: {:?}", first, world);
        prop_assert!(waiting || after == 1, "no promoted child after {:?}: {:?}", first, world);
        let second = plan_over(&world, name_count, &want);
        prop_assert!(second.retire.is_empty(), "retired again: {:?} after {:?}", second, first);
        if !waiting {
            prop_assert!(matches!(step(&second), PromotedStep::InSync(_)), "after {:?}", first);
        }
        // The recyclable children left are exactly those not yet stepped.
        for name in &second.recycle {
            prop_assert!(!first.recycle.contains(name), "{} stepped twice", name);
        }
    }
}
