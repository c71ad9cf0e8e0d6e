//! Observe: everything one pass decides on, gathered in one value from the watch caches, plus
//! the few live reads the safety rules require (a live list before a create, and before a
//! duplicate is purged) and the riders when the rollout changed.

use super::kind::{Resolution, Rollout};
use super::lookup::cached_children;
use super::pass::Pass;
use super::placement::{Resolved, placement};
use crate::children;
use crate::context::Ctx;
use crate::error::Error;
use crate::status::RolloutStatus;
use numaplane_api::common::UpgradeStrategy;
use numaplane_core::config::{UsdeConfig, UserStrategy};
use numaplane_core::pass::{self, Retirement};
use numaplane_core::usde::RiderChange;
use std::sync::Arc;

/// The promoted child's side of a pass.
pub(super) enum Target<R: Rollout> {
    /// What the child needs from other objects is not there yet: the rollout waits, saying
    /// for what.
    Waiting(String),
    /// It cannot be had (e.g. no such ISBServiceRollout): the pass fails once its recycling is
    /// done.
    Failed(Error),
    Ready {
        resolved: Resolved<R::Resolved>,
        promoted: PromotedSeen<Arc<R::Child>>,
        /// How the rollout's riders differ from the promoted child's (read when the rollout
        /// changed or a progressive upgrade runs).
        riders: Vec<RiderChange>,
    },
}

/// How the promoted child was found.
pub(super) enum PromotedSeen<C> {
    /// The newest promoted child in the cache.
    Cached(C),
    /// None cached; this one is being deleted to be recreated.
    Recreating(String),
    /// None cached: the rollout's children as a live list shows them.
    Missing(Vec<C>),
}

/// One pass's observation of a rollout.
pub(super) struct Observed<R: Rollout> {
    /// `metadata.generation` differs from `status.observedGeneration`.
    pub generation_changed: bool,
    /// `status.upgradeInProgress`.
    pub in_progress: UpgradeStrategy,
    /// `status.nameCount`.
    pub name_count: Option<i32>,
    /// Children to retire because of something outside them; when there are any, the pass
    /// retires them and ends, and nothing else was observed.
    pub retire: Vec<Retirement<Arc<R::Child>>>,
    /// The rollout's children in the cache.
    pub cached: Vec<Arc<R::Child>>,
    /// A live list, taken when the cache shows duplicates.
    pub duplicates_live: Option<Vec<Arc<R::Child>>>,
    /// `None` when retiring.
    pub target: Option<Target<R>>,
    pub user_strategy: UserStrategy,
    pub usde: Option<Arc<UsdeConfig>>,
}

/// How the promoted child is found: the newest promoted one in the cache, one being recreated,
/// or none, in which case the rollout's children are listed live.
async fn promoted_seen<R: Rollout>(
    pass: &Pass<'_, R>,
    ctx: &Ctx,
    seen: &Observed<R>,
    views: &[pass::ChildView<'_, Arc<R::Child>>],
    first: bool,
) -> Result<PromotedSeen<Arc<R::Child>>, Error> {
    Ok(
        match (pass::newest_promoted(views), pass::recreating(views)) {
            (Some(p), _) => PromotedSeen::Cached(Arc::clone(&p.handle)),
            (None, Some(old)) => PromotedSeen::Recreating(old.to_string()),
            // A new rollout's first pass: nothing to adopt, and the create's name check still
            // refuses an object someone else made (at cold start this saves a LIST per rollout).
            (None, None) if first && seen.cached.is_empty() => PromotedSeen::Missing(Vec::new()),
            (None, None) => {
                PromotedSeen::Missing(live_list::<R::Child>(ctx, &pass.ns, &pass.name).await?)
            }
        },
    )
}

/// The rollout's children as a live list shows them, shared like the cached ones.
async fn live_list<C: children::ChildObject>(
    ctx: &Ctx,
    ns: &str,
    rollout: &str,
) -> Result<Vec<Arc<C>>, Error> {
    let live = children::list_live::<C>(ctx, ns, rollout).await?;
    Ok(live.into_iter().map(Arc::new).collect())
}

/// `status.nameCount` moved past the cached children it would name (`naming::count_past_live`).
fn name_count_past<C: children::ChildObject>(
    rollout: &str,
    count: Option<i32>,
    cached: &[Arc<C>],
) -> Option<i32> {
    numaplane_core::naming::count_past_live(rollout, count, |n| {
        cached.iter().any(|c| c.meta().name.as_deref() == Some(n))
    })
}

/// Gathers what `pass`, from the status it builds, decides on. `first`: this pass added
/// Numaplane's finalizer, so no earlier pass created a child the cache could be missing.
pub(super) async fn observe<R: Rollout>(
    pass: &Pass<'_, R>,
    ctx: &Ctx,
    first: bool,
) -> Result<Observed<R>, Error> {
    let (obj, st, ns, name) = (pass.obj, &pass.st, pass.ns.as_str(), pass.name.as_str());
    let cached: Vec<Arc<R::Child>> = cached_children::<R>(ctx, ns, name).collect();
    let mut seen = Observed {
        generation_changed: st.common().observed_generation != pass.generation,
        in_progress: st.common().upgrade_in_progress,
        name_count: name_count_past(name, *st.name_count(), &cached),
        retire: obj.retiring(ctx, &cached),
        cached,
        duplicates_live: None,
        target: None,
        user_strategy: ctx.settings.user_strategy(ns),
        usde: ctx.settings.usde(),
    };
    if !seen.retire.is_empty() {
        return Ok(seen);
    }
    let views: Vec<_> = seen
        .cached
        .iter()
        .map(|c| children::handled(c, &pass.uid))
        .collect();
    if !pass::duplicates(&views).is_empty() {
        seen.duplicates_live = Some(live_list::<R::Child>(ctx, ns, name).await?);
    }
    let resolved = match obj.resolve(ctx).await {
        Ok(Resolution::Ready(r)) => Resolved {
            placement: placement(ctx, obj),
            kind: r,
        },
        Ok(Resolution::Waiting(waiting)) => {
            seen.target = Some(Target::Waiting(waiting));
            return Ok(seen);
        }
        Err(e) => {
            seen.target = Some(Target::Failed(e));
            return Ok(seen);
        }
    };
    if let Some(instance) = &resolved.placement.instance
        && let Some(waiting) = obj.placement_waits(ctx, &resolved.kind, instance)
    {
        seen.target = Some(Target::Waiting(waiting));
        return Ok(seen);
    }
    let promoted = promoted_seen(pass, ctx, &seen, &views, first).await?;
    let progressing = seen.in_progress == UpgradeStrategy::Progressive;
    let riders = match &promoted {
        PromotedSeen::Cached(child) if seen.generation_changed || progressing => {
            super::progressive::rider_changes(pass, ctx, child).await
        }
        _ => Ok(Vec::new()),
    };
    drop(views);
    seen.target = Some(match riders {
        Ok(riders) => Target::Ready {
            resolved,
            promoted,
            riders,
        },
        // (the promoted child's step fails, as a failed update would)
        Err(e) => Target::Failed(e),
    });
    Ok(seen)
}
