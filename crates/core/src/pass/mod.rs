//! One pass of a rollout, decided (docs/architecture.md): from what the controller observed of a rollout
//! and its children, the plan of the pass. Which children to mark recyclable (pipelines
//! following their ISB service, duplicates), which recyclable children to take a recycling step
//! for, and what happens to the promoted child: wait, adopt, create, nothing, or an update
//! carried directly or by a strategy.
//!
//! Pure: the controller observes (the caches, plus the live lists the safety rules require:
//! [`newest_promoted`], [`recreating`] and [`duplicates`] say when), calls [`plan()`], and
//! carries the plan out in its order. The plan hands back what the controller gave it, typed:
//! each child view carries a handle `H` (the controller's child object), the promoted child's
//! desired side `D` and what it was resolved from `R` come back in the step that needs them, so
//! no step can name a child the controller did not observe. A strategy the plan hands the promoted child to decides
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

/// A child of the rollout as observed, in the cache or in a live list; `handle` is what the
/// plan hands back when it acts on this child.
#[derive(Debug, Clone)]
pub struct ChildView<'a, H = ()> {
    pub handle: H,
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

impl<'a, H> ChildView<'a, H> {
    /// The same view handing back `handle`.
    pub fn with<G>(self, handle: G) -> ChildView<'a, G> {
        ChildView {
            handle,
            name: self.name,
            labels: self.labels,
            annotations: self.annotations,
            spec: self.spec,
            deleting: self.deleting,
            created: self.created,
            controlled: self.controlled,
        }
    }

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

/// A desired child the plan can look into ([`DesiredView`]) and hand back in an update.
pub trait Desired {
    fn view(&self) -> DesiredView<'_>;
}

impl Desired for DesiredView<'_> {
    fn view(&self) -> DesiredView<'_> {
        *self
    }
}

/// Whether the live child differs from what the rollout wants: its spec (numbers compared by
/// value), a wanted label or annotation missing or different, its Numaflow controller instance
/// (absent and "" alike), or the rollout not its controller. Labels and annotations others add
/// are left alone.
pub fn differs<H>(live: &ChildView<'_, H>, desired: &DesiredView<'_>) -> bool {
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
pub fn newest_promoted<'c, 'a, H>(
    children: &'c [ChildView<'a, H>],
) -> Option<&'c ChildView<'a, H>> {
    children
        .iter()
        .filter(|c| c.is(upgrade_state::PROMOTED) && !c.deleting)
        .max_by_key(|c| c.created)
}

/// The child being deleted to be recreated (`recyclable`, reason `delete-recreate`): its
/// replacement is created only once it is gone.
pub fn recreating<'a, H>(children: &[ChildView<'a, H>]) -> Option<&'a str> {
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
pub fn duplicates<'c, 'a, H>(children: &'c [ChildView<'a, H>]) -> Vec<&'c ChildView<'a, H>> {
    let group = |c: &ChildView<'_, H>| {
        if c.is(upgrade_state::PROMOTED) {
            Some(upgrade_state::PROMOTED)
        } else if c.is_trial() {
            Some(upgrade_state::TRIAL)
        } else {
            None
        }
    };
    let mut groups: BTreeMap<&str, Vec<&ChildView<'a, H>>> = BTreeMap::new();
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
            g
        })
        .collect()
}

/// A child to retire because of something outside it (a pipeline whose ISB service became
/// recyclable follows it, with its reason).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retirement<H> {
    pub child: H,
    pub reason: String,
    /// Why, for the rollout's status message.
    pub why: String,
}

/// How the promoted child was found. `D`: the desired child the controller rendered for it;
/// `R`: what the child was resolved from (ISB service, placement), handed back to create or
/// update it.
#[derive(Debug, Clone)]
pub enum Promoted<'a, H, D, R> {
    /// Not looked for: what the child needs from other objects is missing, and the rollout
    /// waits, saying for what.
    Waiting(&'a str),
    /// The newest promoted child in the cache ([`newest_promoted`]), and the child the rollout
    /// asks for under its name (adapted to it, e.g. autoscaled replicas kept).
    Cached {
        child: ChildView<'a, H>,
        desired: D,
        resolved: R,
    },
    /// None in the cache, and one is being recreated ([`recreating`]).
    Recreating { old: &'a str },
    /// None in the cache: the live list taken before a create (a stale cache must never give a
    /// rollout two promoted children).
    Missing {
        live: Vec<ChildView<'a, H>>,
        resolved: R,
    },
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
pub struct PassInput<'a, H, D, R> {
    /// The rollout's name.
    pub rollout: &'a str,
    /// The child kind, for messages (`Pipeline`).
    pub child_kind: &'a str,
    /// The rollout's children in the cache, in any state.
    pub cached: &'a [ChildView<'a, H>],
    /// The live list taken because the cache showed [`duplicates`] (confirmed by it, so a
    /// label flip the cache has not caught up with is never taken for one).
    pub duplicates_live: Option<&'a [ChildView<'a, H>]>,
    /// When there are any, the pass retires them and ends: `promoted` is not read.
    pub retire: &'a [Retirement<H>],
    pub promoted: Promoted<'a, H, D, R>,
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
pub struct Plan<H, D, R> {
    /// Children to mark recyclable, with the reason.
    pub retire: Vec<(H, String)>,
    /// Recyclable children to take one recycling step for (drain, delete).
    pub recycle: Vec<H>,
    /// An error here fails the pass once the children above are seen to.
    pub promoted: Result<PromotedStep<H, D, R>, PlanError>,
}

/// What happens to the promoted child.
#[derive(Debug, Clone, PartialEq)]
pub enum PromotedStep<H, D, R> {
    /// Nothing now: the rollout waits, saying for what.
    Wait(String),
    /// The live list shows a promoted child the cache did not know yet: it is the one.
    Adopt(H),
    /// Create it as `name` (`name_count` is the next `status.nameCount`), after marking the
    /// trials left without a promoted child to judge them against (`discontinue`) recyclable.
    Create {
        resolved: R,
        name: String,
        name_count: i32,
        discontinue: Vec<H>,
    },
    /// It is as the rollout asks and no strategy runs.
    InSync(H),
    /// Carry the rollout's spec (`desired`) to it (`live`): by a progressive step, or the
    /// kind's own way (applied directly, or a step of pause-and-drain or recreate).
    Update {
        live: H,
        desired: D,
        resolved: R,
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
pub fn plan<H: Clone, D: Desired, R>(input: PassInput<'_, H, D, R>) -> Plan<H, D, R> {
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
    Plan {
        retire: purge
            .into_iter()
            .map(|c| (c.handle.clone(), upgrade_state_reason::PURGE.to_string()))
            .collect(),
        recycle: input
            .cached
            .iter()
            .filter(|c| c.is(upgrade_state::RECYCLABLE) && !c.deleting)
            .map(|c| c.handle.clone())
            .collect(),
        promoted: promoted_step(&input.facts(), input.promoted),
    }
}

/// What the promoted child's step decides on besides the child itself.
struct Facts<'a> {
    rollout: &'a str,
    child_kind: &'a str,
    generation_changed: bool,
    in_progress: UpgradeStrategy,
    name_count: Option<i32>,
    user_strategy: UserStrategy,
    progressive: Option<ProgressiveView<'a>>,
    riders: &'a [RiderChange],
    spec_path: &'a str,
}

impl<'a, H, D, R> PassInput<'a, H, D, R> {
    fn facts(&self) -> Facts<'a> {
        Facts {
            rollout: self.rollout,
            child_kind: self.child_kind,
            generation_changed: self.generation_changed,
            in_progress: self.in_progress,
            name_count: self.name_count,
            user_strategy: self.user_strategy,
            progressive: self.progressive,
            riders: self.riders,
            spec_path: self.spec_path,
        }
    }
}

fn promoted_step<H: Clone, D: Desired, R>(
    input: &Facts<'_>,
    promoted: Promoted<'_, H, D, R>,
) -> Result<PromotedStep<H, D, R>, PlanError> {
    match promoted {
        Promoted::Waiting(why) => Ok(PromotedStep::Wait(why.to_string())),
        Promoted::Recreating { old } => Ok(PromotedStep::Wait(format!(
            "recreate: waiting for {} {old} to be deleted before creating its replacement",
            input.child_kind
        ))),
        Promoted::Missing { live, resolved } => create_or_adopt(input, live, resolved),
        Promoted::Cached {
            child,
            desired,
            resolved,
        } => Ok(update(input, child, desired, resolved)),
    }
}

fn create_or_adopt<H: Clone, D, R>(
    input: &Facts<'_>,
    live: Vec<ChildView<'_, H>>,
    resolved: R,
) -> Result<PromotedStep<H, D, R>, PlanError> {
    // (A child being deleted is gone for our purposes: its replacement starts now.)
    if let Some(existing) = live
        .iter()
        .find(|c| c.is(upgrade_state::PROMOTED) && !c.deleting)
    {
        return Ok(PromotedStep::Adopt(existing.handle.clone()));
    }
    let taken: BTreeSet<&str> = live.iter().map(|c| c.name).collect();
    let (name, name_count) =
        crate::naming::allocate_free(input.rollout, input.name_count, |n| taken.contains(n))
            .ok_or_else(|| PlanError::NoFreeName(input.rollout.to_string()))?;
    Ok(PromotedStep::Create {
        resolved,
        name,
        name_count,
        discontinue: live
            .iter()
            .filter(|c| c.is_trial() && !c.deleting)
            .map(|c| c.handle.clone())
            .collect(),
    })
}

fn update<H, D: Desired, R>(
    input: &Facts<'_>,
    live: ChildView<'_, H>,
    desired: D,
    resolved: R,
) -> PromotedStep<H, D, R> {
    let want = desired.view();
    let differs = differs(&live, &want);
    // A strategy in progress takes its next step even when nothing differs.
    if !(input.generation_changed || input.in_progress != UpgradeStrategy::NoOp || differs) {
        return PromotedStep::InSync(live.handle);
    }
    let progressive = input
        .progressive
        .is_some_and(|p| by_progressive(input, &p, &live, &want, differs));
    let riders_progressive = input
        .riders
        .iter()
        .any(|c| matches!(c.change, RiderChangeKind::Modified { progressive: true }));
    let changed_fields = changed_fields(input, &live, &want, progressive);
    PromotedStep::Update {
        live: live.handle,
        desired,
        resolved,
        progressive,
        riders_progressive,
        changed_fields,
    }
}

/// Whether the progressive strategy carries this change: one is in progress, or the change
/// (spec, metadata or riders) is classified progressive under the `progressive` user strategy.
fn by_progressive<H>(
    input: &Facts<'_>,
    p: &ProgressiveView<'_>,
    live: &ChildView<'_, H>,
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
fn changed_fields<H>(
    input: &Facts<'_>,
    live: &ChildView<'_, H>,
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
