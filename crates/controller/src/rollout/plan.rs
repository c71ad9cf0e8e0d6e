//! Plan: the pass's decisions, taken from its observation without I/O. The rollout is checked,
//! the child it asks for rendered under each name the pass needs, and
//! [`numaplane_core::pass::plan`] decides; what comes back carries the objects to act on.

use super::desired::desired_child;
use super::kind::Rollout;
use super::observe::{Observed, PromotedSeen, Target};
use super::pass::Pass;
use super::placement::Resolved;
use crate::children::{self, DesiredChild};
use crate::error::Error;
use kube::ResourceExt;
use numaplane_api::Namespaced;
use numaplane_api::keys::upgrade_state;
use numaplane_core::pass::{self, ProgressiveView, Promoted, PromotedStep};
use std::sync::Arc;

/// What one pass does, in this order, with the objects it acts on.
pub(super) struct PassPlan<R: Rollout> {
    /// The rollout changed since the status last recorded it.
    pub generation_changed: bool,
    /// Children to mark recyclable, with the reason.
    pub retire: Vec<(Arc<R::Child>, String)>,
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
    Adopt(Arc<R::Child>),
    Create {
        desired: DesiredChild,
        name_count: i32,
        /// Trials left without a promoted child to judge them against.
        discontinue: Vec<Arc<R::Child>>,
    },
    InSync(Arc<R::Child>),
    Update(Update<R>),
}

/// Carry the rollout's spec to the promoted child.
pub(super) struct Update<R: Rollout> {
    pub live: Arc<R::Child>,
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
            namespace: child.ns().to_string(),
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

/// Plans one pass of `obj` from what was observed: [`pass::plan`] decides, and hands back the
/// children, the desired child and the resolution it was given, so each of its steps maps to
/// one of ours. (Long: one arm per way the promoted child was found and per step.)
pub(super) fn plan<R: Rollout>(
    pass: &Pass<'_, R>,
    seen: Observed<R>,
) -> Result<PassPlan<R>, Error> {
    let (obj, uid) = (pass.obj, pass.uid.as_str());
    let Observed {
        generation_changed,
        in_progress,
        name_count,
        retire,
        cached,
        duplicates_live,
        target,
        user_strategy,
        usde,
    } = seen;
    let views: Vec<_> = cached.iter().map(|c| children::handled(c, uid)).collect();
    let duplicates_live: Option<Vec<_>> = duplicates_live
        .as_ref()
        .map(|l| l.iter().map(|c| children::handled(c, uid)).collect());
    // The promoted child's side: how it was found, or why the pass fails once its children
    // are seen to.
    let (mut fail, mut riders) = (None, Vec::new());
    let (waiting, promoted_live, missing_live);
    let promoted = match target {
        None => Promoted::Waiting(""),
        Some(Target::Failed(e)) => {
            fail = Some(e);
            Promoted::Waiting("")
        }
        Some(Target::Waiting(why)) => {
            waiting = why;
            Promoted::Waiting(&waiting)
        }
        Some(Target::Ready {
            resolved,
            promoted,
            riders: changes,
        }) => match promoted {
            PromotedSeen::Recreating(old) => {
                waiting = old;
                Promoted::Recreating { old: &waiting }
            }
            PromotedSeen::Missing(live) => {
                missing_live = live;
                Promoted::Missing {
                    live: missing_live
                        .iter()
                        .map(|c| children::handled(c, uid))
                        .collect(),
                    resolved,
                }
            }
            PromotedSeen::Cached(live) => match desired_for(obj, &resolved, &live) {
                Ok(desired) => {
                    riders = changes;
                    promoted_live = live;
                    Promoted::Cached {
                        child: children::handled(&promoted_live, uid),
                        desired,
                        resolved,
                    }
                }
                Err(e) => {
                    fail = Some(e);
                    Promoted::Waiting("")
                }
            },
        },
    };
    let progressive = obj.progressive_parts().map(|p| ProgressiveView {
        kind: p.kind,
        usde: usde.as_deref().map(|u| u.for_kind(p.kind)),
    });
    let core = pass::plan(pass::PassInput {
        rollout: &pass.name,
        child_kind: children::kind_str::<R::Child>(),
        cached: &views,
        duplicates_live: duplicates_live.as_deref(),
        retire: &retire,
        promoted,
        generation_changed,
        in_progress,
        name_count,
        user_strategy,
        progressive,
        riders: &riders,
        spec_path: R::KIND.spec_path(),
    });
    let promoted = match (fail, core.promoted) {
        (Some(e), _) => Step::Fail(e),
        (None, Err(e)) => Step::Fail(Error::InvalidSpec(e.to_string())),
        (None, Ok(PromotedStep::Wait(why))) => Step::Wait(why),
        (None, Ok(PromotedStep::Adopt(child))) => Step::Adopt(child),
        (None, Ok(PromotedStep::InSync(child))) => Step::InSync(child),
        (
            None,
            Ok(PromotedStep::Create {
                resolved,
                name,
                name_count,
                discontinue,
            }),
        ) => {
            let template = obj.child_template();
            match desired_child(
                obj,
                &resolved,
                &name,
                upgrade_state::PROMOTED,
                template,
                None,
            ) {
                Ok(desired) => Step::Create {
                    desired,
                    name_count,
                    discontinue,
                },
                Err(e) => Step::Fail(e),
            }
        }
        (
            None,
            Ok(PromotedStep::Update {
                live,
                desired,
                resolved,
                progressive,
                riders_progressive,
                changed_fields,
            }),
        ) => Step::Update(Update {
            live,
            desired,
            resolved,
            progressive,
            riders_progressive,
            changed_fields,
        }),
    };
    Ok(PassPlan {
        generation_changed,
        retire: core.retire,
        recycle: core.recycle,
        promoted,
    })
}
