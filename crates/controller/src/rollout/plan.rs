//! Plan: the pass's decisions, taken from its observation without I/O. The rollout is checked,
//! the child it asks for rendered under each name the pass needs, and
//! [`numaplane_core::pass::plan`] decides; what comes back names the objects to act on.

use super::desired::desired_child;
use super::kind::Rollout;
use super::observe::{Observed, PromotedSeen, Target};
use super::pass::Pass;
use super::placement::Resolved;
use crate::children::{self, DesiredChild};
use crate::error::Error;
use kube::{Resource, ResourceExt};
use numaplane_api::keys::upgrade_state;
use numaplane_core::pass::{self, ProgressiveView, Promoted, PromotedStep};
use std::sync::Arc;

/// What one pass does, in this order, with the objects it acts on.
pub(super) struct PassPlan<R: Rollout> {
    /// The rollout changed since the status last recorded it.
    pub generation_changed: bool,
    /// Children to mark recyclable, with the reason.
    pub retire: Vec<(R::Child, String)>,
    /// Recyclable children to take one recycling step for.
    pub recycle: Vec<Arc<R::Child>>,
    pub promoted: Step<R>,
}

/// What happens to the promoted child.
pub(super) enum Step<R: Rollout> {
    /// Nothing now: the rollout waits, saying for what.
    Wait(String),
    /// The pass fails (the children above were seen to first).
    Fail(Error),
    /// A promoted child the cache did not know yet.
    Adopt(R::Child),
    Create {
        desired: DesiredChild,
        name_count: i32,
        /// Trials left without a promoted child to judge them against.
        discontinue: Vec<R::Child>,
    },
    InSync(R::Child),
    Update(Update<R>),
}

/// Carry the rollout's spec to the promoted child.
pub(super) struct Update<R: Rollout> {
    pub live: R::Child,
    pub desired: DesiredChild,
    pub resolved: Resolved<R::Resolved>,
    /// By a progressive step, else the kind's own way (directly, pause-and-drain, recreate).
    pub progressive: bool,
    pub riders_progressive: bool,
    pub changed_fields: Vec<String>,
}

/// The rollout's own checks: its name must label its children, its child spec and metadata must
/// be applyable. A failure fails the pass before anything is read or done.
pub(super) fn validate<R: Rollout>(obj: &R) -> Result<(), Error> {
    let name = obj.name_any();
    // Every child is labelled with its rollout's name: one that is no label value (object names
    // may be 253 characters) could never create a child, and each attempt took a new name.
    if !children::valid_label_value(&name) {
        return Err(Error::InvalidSpec(format!(
            "metadata.name: {} characters, at most 63 can label its children ({})",
            name.chars().count(),
            numaplane_api::keys::labels::PARENT_ROLLOUT_NAME
        )));
    }
    let (meta, spec) = obj.child_template();
    R::validate(spec)?;
    if let Some(meta) = meta {
        let at = format!("spec.{}", R::KIND.template_field());
        let meta = serde_json::to_value(meta).unwrap_or_default();
        numaplane_core::child::validate_applyable(&meta, &format!("{at}.metadata"))
            .map_err(|e| Error::InvalidSpec(e.to_string()))?;
    }
    Ok(())
}

/// The rollout must be the promoted child's owner: someone else's object with our labels is
/// never taken over.
fn check_owned<R: Rollout>(obj: &R, child: &R::Child) -> Result<(), Error> {
    let uid = obj.uid();
    let owned = child
        .owner_references()
        .iter()
        .any(|o| o.kind == R::kind(&()) && Some(&o.uid) == uid.as_ref());
    if owned {
        Ok(())
    } else {
        Err(Error::NotOwned {
            kind: children::kind_str::<R::Child>(),
            name: child.name_any(),
            namespace: child.namespace().unwrap_or_default(),
            owner_kind: children::kind_str::<R>(),
        })
    }
}

/// The child the rollout asks for under the promoted child's name, adapted to it.
fn desired_for<R: Rollout>(
    obj: &R,
    resolved: &Resolved<R::Resolved>,
    live: &R::Child,
) -> Result<DesiredChild, Error> {
    check_owned(obj, live)?;
    desired_child(
        obj,
        resolved,
        &live.name_any(),
        upgrade_state::PROMOTED,
        obj.child_template(),
        Some(live),
    )
}

/// Plans one pass of `obj` from what was observed. (Long: it pairs each decision of the core
/// plan with the objects it is about, one arm per step.)
pub(super) fn plan<R: Rollout>(
    pass: &Pass<'_, R>,
    seen: Observed<R>,
) -> Result<PassPlan<R>, Error> {
    let obj = pass.obj;
    let views: Vec<_> = seen
        .cached
        .iter()
        .map(|c| children::view(&**c, &pass.uid))
        .collect();
    let duplicates_live: Option<Vec<_>> = seen
        .duplicates_live
        .as_ref()
        .map(|l| l.iter().map(|c| children::view(c, &pass.uid)).collect());
    // The promoted child's side: the child it asks for, or why it cannot be had.
    let (desired, failed) = match &seen.target {
        Some(Target::Ready {
            resolved,
            promoted: PromotedSeen::Cached(live),
            ..
        }) => match desired_for(obj, resolved, live) {
            Ok(d) => (Some(d), None),
            Err(e) => (None, Some(e)),
        },
        _ => (None, None),
    };
    let mut riders: &[numaplane_core::usde::RiderChange] = &[];
    let promoted = match &seen.target {
        None | Some(Target::Failed(_)) => Promoted::Waiting(""),
        Some(Target::Waiting(why)) => Promoted::Waiting(why),
        Some(Target::Ready {
            promoted,
            riders: changes,
            ..
        }) => match (promoted, &desired) {
            (PromotedSeen::Recreating(old), _) => Promoted::Recreating { old },
            (PromotedSeen::Missing(live), _) => Promoted::Missing {
                live: live.iter().map(|c| children::view(c, &pass.uid)).collect(),
            },
            (PromotedSeen::Cached(live), Some(d)) => {
                riders = changes;
                Promoted::Cached {
                    child: children::view(live, &pass.uid),
                    desired: d.view(),
                }
            }
            // (its desired child failed: the pass fails)
            (PromotedSeen::Cached(_), None) => Promoted::Waiting(""),
        },
    };
    let usde = seen.usde.as_deref();
    let progressive = obj.progressive_parts().map(|p| ProgressiveView {
        kind: p.kind,
        usde: usde.map(|u| u.for_kind(p.kind)),
    });
    let core = pass::plan(&pass::PassInput {
        rollout: &pass.name,
        child_kind: children::kind_str::<R::Child>(),
        cached: &views,
        duplicates_live: duplicates_live.as_deref(),
        retire: &seen.retire,
        promoted,
        generation_changed: seen.generation_changed,
        in_progress: seen.in_progress,
        name_count: seen.name_count,
        user_strategy: seen.user_strategy,
        progressive,
        riders,
        spec_path: R::KIND.spec_path(),
    });
    drop(views);
    drop(duplicates_live);
    // Purged children as the live list showed them; retired ones as cached.
    let named = |list: &[R::Child], name: &str| {
        list.iter()
            .find(|c| c.meta().name.as_deref() == Some(name))
            .cloned()
    };
    let retire = core
        .retire
        .into_iter()
        .filter_map(|(n, reason)| {
            let live = seen.duplicates_live.as_deref().unwrap_or_default();
            named(live, &n)
                .or_else(|| {
                    seen.cached
                        .iter()
                        .find(|c| c.meta().name.as_deref() == Some(n.as_str()))
                        .map(|c| (**c).clone())
                })
                .map(|c| (c, reason))
        })
        .collect();
    let recycle = seen
        .cached
        .iter()
        .filter(|c| {
            core.recycle
                .iter()
                .any(|n| Some(n.as_str()) == c.meta().name.as_deref())
        })
        .cloned()
        .collect();
    let promoted = match (failed, core.promoted, seen.target, desired) {
        (Some(e), ..) | (None, _, Some(Target::Failed(e)), _) => Step::Fail(e),
        (None, Err(e), ..) => Step::Fail(Error::InvalidSpec(e.to_string())),
        (None, Ok(PromotedStep::Wait(why)), ..) => Step::Wait(why),
        (
            None,
            Ok(PromotedStep::Adopt(name)),
            Some(Target::Ready {
                promoted: PromotedSeen::Missing(live),
                ..
            }),
            _,
        ) => match named(&live, &name) {
            Some(c) => Step::Adopt(c),
            None => Step::Wait(format!("adopting {name}")),
        },
        (
            None,
            Ok(PromotedStep::Create {
                name,
                name_count,
                discontinue,
            }),
            Some(Target::Ready {
                resolved,
                promoted: PromotedSeen::Missing(live),
                ..
            }),
            _,
        ) => {
            match desired_child(
                obj,
                &resolved,
                &name,
                upgrade_state::PROMOTED,
                obj.child_template(),
                None,
            ) {
                Ok(desired) => Step::Create {
                    desired,
                    name_count,
                    discontinue: discontinue.iter().filter_map(|n| named(&live, n)).collect(),
                },
                Err(e) => Step::Fail(e),
            }
        }
        (
            None,
            Ok(PromotedStep::InSync),
            Some(Target::Ready {
                promoted: PromotedSeen::Cached(live),
                ..
            }),
            _,
        ) => Step::InSync(live),
        (
            None,
            Ok(PromotedStep::Update {
                progressive,
                riders_progressive,
                changed_fields,
            }),
            Some(Target::Ready {
                resolved,
                promoted: PromotedSeen::Cached(live),
                ..
            }),
            Some(desired),
        ) => Step::Update(Update {
            live,
            desired,
            resolved,
            progressive,
            riders_progressive,
            changed_fields,
        }),
        (None, Ok(step), ..) => {
            return Err(Error::InvalidSpec(format!(
                "internal: planned {step:?} for a promoted child not observed so"
            )));
        }
    };
    Ok(PassPlan {
        generation_changed: seen.generation_changed,
        retire,
        recycle,
        promoted,
    })
}
