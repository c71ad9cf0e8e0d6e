//! One pass of a rollout, decided (docs/architecture.md): from what the controller observed of a rollout
//! and its children, the plan of the pass. Which children to mark recyclable (pipelines
//! following their ISB service, duplicates), which recyclable children to take a recycling step
//! for, and what happens to the promoted child: wait, adopt, create, nothing, or an update
//! carried directly or by a strategy.
//!
//! Pure: the controller observes (the caches, plus the live lists the safety rules require:
//! [`newest_promoted`], [`recreating`] and [`duplicates`] say when), calls [`plan()`], and
//! carries the plan out in its order. A strategy the plan hands the promoted child to decides
//! its own steps the same way ([`crate::progressive::step`], [`crate::ppnd::step`],
//! [`crate::usde::decide`], [`crate::recycle`]).

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

use crate::config::{UsdeKindConfig, UserStrategy};
use crate::progressive::scale::comparable_promoted_spec;
use crate::usde::{self, RiderChange, RiderChangeKind, json_eq};
use k8s_openapi::jiff::Timestamp;
use numaplane_api::Kind;
use numaplane_api::common::UpgradeStrategy;
use numaplane_api::keys::{labels, upgrade_state, upgrade_state_reason};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// A child of the rollout as observed, in the cache or in a live list.
#[derive(Debug, Clone)]
pub struct ChildView<'a> {
    pub name: &'a str,
    pub labels: &'a BTreeMap<String, String>,
    pub annotations: &'a BTreeMap<String, String>,
    pub spec: &'a Value,
    /// Its deletion has begun.
    pub deleting: bool,
    pub created: Option<Timestamp>,
    /// Its controller owner reference is this rollout.
    pub controlled: bool,
}

impl ChildView<'_> {
    fn state(&self) -> Option<&str> {
        self.labels.get(labels::UPGRADE_STATE).map(String::as_str)
    }

    fn is(&self, state: &str) -> bool {
        self.state() == Some(state)
    }

    fn is_trial(&self) -> bool {
        self.is(upgrade_state::TRIAL) || self.is(upgrade_state::IN_PROGRESS)
    }
}

/// The child the rollout asks for, rendered for one child name.
#[derive(Debug, Clone, Copy)]
pub struct DesiredView<'a> {
    pub labels: &'a BTreeMap<String, String>,
    pub annotations: &'a BTreeMap<String, String>,
    pub spec: &'a Value,
}

/// Whether the live child differs from what the rollout wants: its spec (numbers compared by
/// value), a wanted label or annotation missing or different, its Numaflow controller instance
/// (absent and "" alike), or the rollout not its controller. Labels and annotations others add
/// are left alone.
pub fn differs(live: &ChildView<'_>, desired: &DesiredView<'_>) -> bool {
    let subset = |want: &BTreeMap<String, String>, have: &BTreeMap<String, String>| {
        want.iter()
            .filter(|(k, _)| k.as_str() != numaplane_api::keys::annotations::NUMAFLOW_INSTANCE)
            .all(|(k, v)| have.get(k) == Some(v))
    };
    let instance = crate::child::numaflow_instance;
    !json_eq(live.spec, desired.spec)
        || !subset(desired.labels, live.labels)
        || !subset(desired.annotations, live.annotations)
        || instance(desired.annotations) != instance(live.annotations)
        || !live.controlled
}

/// The newest promoted child not being deleted: the one the rollout's spec is carried to.
pub fn newest_promoted<'c, 'a>(children: &'c [ChildView<'a>]) -> Option<&'c ChildView<'a>> {
    children
        .iter()
        .filter(|c| c.is(upgrade_state::PROMOTED) && !c.deleting)
        .max_by_key(|c| c.created)
}

/// The child being deleted to be recreated (`recyclable`, reason `delete-recreate`): its
/// replacement is created only once it is gone.
pub fn recreating<'a>(children: &[ChildView<'a>]) -> Option<&'a str> {
    children
        .iter()
        .find(|c| {
            c.is(upgrade_state::RECYCLABLE)
                && c.labels
                    .get(labels::UPGRADE_STATE_REASON)
                    .map(String::as_str)
                    == Some(upgrade_state_reason::DELETE_RECREATE)
        })
        .map(|c| c.name)
}

/// Children in one upgrade state beside a newer one (two promoted, two trials: a crash between
/// two writes, a hand edit), to be marked recyclable with reason `purge`. Only children the
/// rollout controls count: someone else's object carrying our labels never makes ours go.
pub fn duplicates<'a>(children: &[ChildView<'a>]) -> Vec<&'a str> {
    let group = |c: &ChildView<'_>| {
        if c.is(upgrade_state::PROMOTED) {
            Some(upgrade_state::PROMOTED)
        } else if c.is_trial() {
            Some(upgrade_state::TRIAL)
        } else {
            None
        }
    };
    let mut groups: BTreeMap<&str, Vec<&ChildView<'a>>> = BTreeMap::new();
    for c in children.iter().filter(|c| c.controlled && !c.deleting) {
        if let Some(g) = group(c) {
            groups.entry(g).or_default().push(c);
        }
    }
    groups
        .into_values()
        .flat_map(|mut g| {
            g.sort_by_key(|c| (c.created, c.name));
            g.pop();
            g.into_iter().map(|c| c.name)
        })
        .collect()
}

/// A child to retire because of something outside it (a pipeline whose ISB service became
/// recyclable follows it, with its reason).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retirement {
    pub child: String,
    pub reason: String,
    /// Why, for the rollout's status message.
    pub why: String,
}

/// How the promoted child was found.
#[derive(Debug, Clone)]
pub enum Promoted<'a> {
    /// Not looked for: what the child needs from other objects is missing, and the rollout
    /// waits, saying for what.
    Waiting(&'a str),
    /// The newest promoted child in the cache ([`newest_promoted`]), and the child the rollout
    /// asks for under its name (adapted to it, e.g. autoscaled replicas kept).
    Cached {
        child: ChildView<'a>,
        desired: DesiredView<'a>,
    },
    /// None in the cache, and one is being recreated ([`recreating`]).
    Recreating { old: &'a str },
    /// None in the cache: the live list taken before a create (a stale cache must never give a
    /// rollout two promoted children).
    Missing { live: Vec<ChildView<'a>> },
}

/// The rollout's view of the progressive strategy, for kinds that have it.
#[derive(Debug, Clone, Copy)]
pub struct ProgressiveView<'a> {
    pub kind: Kind,
    /// The USDE field lists of the kind; `None` classifies every change as a direct apply.
    pub usde: Option<&'a UsdeKindConfig>,
}

/// Everything one pass decides on.
#[derive(Debug, Clone)]
pub struct PassInput<'a> {
    /// The rollout's name.
    pub rollout: &'a str,
    /// The child kind, for messages (`Pipeline`).
    pub child_kind: &'a str,
    /// The rollout's children in the cache, in any state.
    pub cached: &'a [ChildView<'a>],
    /// The live list taken because the cache showed [`duplicates`] (confirmed by it, so a
    /// label flip the cache has not caught up with is never taken for one).
    pub duplicates_live: Option<&'a [ChildView<'a>]>,
    /// When there are any, the pass retires them and ends: `promoted` is not read.
    pub retire: &'a [Retirement],
    pub promoted: Promoted<'a>,
    /// `metadata.generation` differs from `status.observedGeneration`.
    pub generation_changed: bool,
    /// `status.upgradeInProgress`.
    pub in_progress: UpgradeStrategy,
    /// `status.nameCount`.
    pub name_count: Option<i32>,
    /// The namespace's (or the global) upgrade strategy.
    pub user_strategy: UserStrategy,
    /// `None` for kinds without the progressive strategy.
    pub progressive: Option<ProgressiveView<'a>>,
    /// How the rollout's riders differ from the promoted child's (observed only when the rollout
    /// changed or a progressive upgrade runs).
    pub riders: &'a [RiderChange],
    /// Path of the child spec in the rollout (`spec.pipeline.spec`), for the changed fields.
    pub spec_path: &'a str,
}

/// What one pass does, in this order.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Children to mark recyclable, with the reason.
    pub retire: Vec<(String, String)>,
    /// Recyclable children to take one recycling step for (drain, delete).
    pub recycle: Vec<String>,
    /// An error here fails the pass once the children above are seen to.
    pub promoted: Result<PromotedStep, PlanError>,
}

/// What happens to the promoted child.
#[derive(Debug, Clone, PartialEq)]
pub enum PromotedStep {
    /// Nothing now: the rollout waits, saying for what.
    Wait(String),
    /// The live list shows a promoted child the cache did not know yet: it is the one.
    Adopt(String),
    /// Create it as `name` (`name_count` is the next `status.nameCount`), after marking the
    /// trials left without a promoted child to judge them against (`discontinue`) recyclable.
    Create {
        name: String,
        name_count: i32,
        discontinue: Vec<String>,
    },
    /// It is as the rollout asks and no strategy runs.
    InSync,
    /// Carry the rollout's spec to it: by a progressive step, or the kind's own way (applied
    /// directly, or a step of pause-and-drain or recreate).
    Update {
        progressive: bool,
        /// A `progressive: true` rider was modified (a trial even if the spec is unchanged).
        riders_progressive: bool,
        /// Where the child differed from the rollout, as paths into the rollout.
        changed_fields: Vec<String>,
    },
}

/// Why no plan could be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("no free child name for {0}: all 1000 indices are taken")]
    NoFreeName(String),
}

impl PlanError {
    pub fn reason(&self) -> &'static str {
        "NoFreeName"
    }
}

/// Plans one pass of a rollout.
pub fn plan(input: &PassInput<'_>) -> Plan {
    // Pipelines follow their retired ISB service first; the pass then ends, so nothing is
    // applied to a child from a cache that has not seen the change yet.
    if !input.retire.is_empty() {
        let why: Vec<&str> = input.retire.iter().map(|r| r.why.as_str()).collect();
        return Plan {
            retire: input
                .retire
                .iter()
                .map(|r| (r.child.clone(), r.reason.clone()))
                .collect(),
            recycle: Vec::new(),
            promoted: Ok(PromotedStep::Wait(format!(
                "retiring pipelines {}",
                why.join(", ")
            ))),
        };
    }
    let purge = if duplicates(input.cached).is_empty() {
        Vec::new()
    } else {
        duplicates(input.duplicates_live.unwrap_or_default())
    };
    let recycle = input
        .cached
        .iter()
        .filter(|c| c.is(upgrade_state::RECYCLABLE) && !c.deleting)
        .map(|c| c.name.to_string())
        .collect();
    Plan {
        retire: purge
            .into_iter()
            .map(|n| (n.to_string(), upgrade_state_reason::PURGE.to_string()))
            .collect(),
        recycle,
        promoted: promoted_step(input),
    }
}

fn promoted_step(input: &PassInput<'_>) -> Result<PromotedStep, PlanError> {
    match &input.promoted {
        Promoted::Waiting(why) => Ok(PromotedStep::Wait(why.to_string())),
        Promoted::Recreating { old } => Ok(PromotedStep::Wait(format!(
            "recreate: waiting for {} {old} to be deleted before creating its replacement",
            input.child_kind
        ))),
        Promoted::Missing { live } => create_or_adopt(input, live),
        Promoted::Cached { child, desired } => Ok(update(input, child, desired)),
    }
}

fn create_or_adopt(
    input: &PassInput<'_>,
    live: &[ChildView<'_>],
) -> Result<PromotedStep, PlanError> {
    // (A child being deleted is gone for our purposes: its replacement starts now.)
    if let Some(existing) = live
        .iter()
        .find(|c| c.is(upgrade_state::PROMOTED) && !c.deleting)
    {
        return Ok(PromotedStep::Adopt(existing.name.to_string()));
    }
    let taken: BTreeSet<&str> = live.iter().map(|c| c.name).collect();
    let (name, name_count) =
        crate::naming::allocate_free(input.rollout, input.name_count, |n| taken.contains(n))
            .ok_or_else(|| PlanError::NoFreeName(input.rollout.to_string()))?;
    Ok(PromotedStep::Create {
        name,
        name_count,
        discontinue: live
            .iter()
            .filter(|c| c.is_trial() && !c.deleting)
            .map(|c| c.name.to_string())
            .collect(),
    })
}

fn update(input: &PassInput<'_>, live: &ChildView<'_>, desired: &DesiredView<'_>) -> PromotedStep {
    let differs = differs(live, desired);
    // A strategy in progress takes its next step even when nothing differs.
    if !(input.generation_changed || input.in_progress != UpgradeStrategy::NoOp || differs) {
        return PromotedStep::InSync;
    }
    let progressive = input
        .progressive
        .is_some_and(|p| by_progressive(input, &p, live, desired, differs));
    PromotedStep::Update {
        progressive,
        riders_progressive: input
            .riders
            .iter()
            .any(|c| matches!(c.change, RiderChangeKind::Modified { progressive: true })),
        changed_fields: changed_fields(input, live, desired, progressive),
    }
}

/// Whether the progressive strategy carries this change: one is in progress, or the change
/// (spec, metadata or riders) is classified progressive under the `progressive` user strategy.
fn by_progressive(
    input: &PassInput<'_>,
    p: &ProgressiveView<'_>,
    live: &ChildView<'_>,
    desired: &DesiredView<'_>,
    differs: bool,
) -> bool {
    if input.in_progress == UpgradeStrategy::Progressive {
        return true;
    }
    if input.user_strategy != UserStrategy::Progressive || (!differs && input.riders.is_empty()) {
        return false;
    }
    let decision = usde::decide(&usde::DecisionInput {
        user_strategy: UserStrategy::Progressive,
        config: p.usde,
        desired_spec: desired.spec,
        live_spec: live.spec,
        desired_labels: desired.labels,
        live_labels: live.labels,
        desired_annotations: desired.annotations,
        live_annotations: live.annotations,
        riders: input.riders,
    });
    decision.strategy == UpgradeStrategy::Progressive
}

/// Where the promoted child differs from the rollout, as paths into the rollout: under
/// progressive without the scale the engine itself changes on the promoted child.
fn changed_fields(
    input: &PassInput<'_>,
    live: &ChildView<'_>,
    desired: &DesiredView<'_>,
    progressive: bool,
) -> Vec<String> {
    let path = input.spec_path;
    let mut fields = match input.progressive.filter(|_| progressive) {
        Some(p) => crate::history::changed_fields(
            path,
            &comparable_promoted_spec(p.kind, live.spec),
            &comparable_promoted_spec(p.kind, desired.spec),
        ),
        None => crate::history::changed_fields(path, live.spec, desired.spec),
    };
    let meta = path.strip_suffix(".spec").unwrap_or(path);
    for (what, want, have) in [
        ("labels", desired.labels, live.labels),
        ("annotations", desired.annotations, live.annotations),
    ] {
        fields.extend(
            want.iter()
                .filter(|(k, v)| have.get(*k) != Some(*v))
                .map(|(k, _)| format!("{meta}.metadata.{what}[{k:?}]")),
        );
    }
    if !input.riders.is_empty() {
        fields.push("spec.riders".into());
    }
    fields
}
