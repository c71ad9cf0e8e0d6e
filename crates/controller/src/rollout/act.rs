//! Act: carries out a pass's plan in its order (children retired, recyclable ones stepped, then
//! the promoted child, its riders and companions), and decides nothing of its own. A strategy
//! the plan hands the promoted child to (progressive, the kind's own) records its state in the
//! status before it acts, as the durability contract requires.

use super::desired::desired_riders;
use super::kind::{Carry, Rollout, publish};
use super::observation::Trace;
use super::pass::Pass;
use super::plan::{PassPlan, Step, Update};
use crate::children::{self, ChildObject, DesiredChild};
use crate::context::Ctx;
use crate::error::Error;
use crate::riders;
use crate::status::RolloutStatus;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::events::EventType;
use numaplane_api::common::UpgradeStrategy;
use numaplane_api::keys::{self, upgrade_state_reason};
use std::sync::Arc;
use tracing::{info, warn};

/// What acting left for the report.
pub(super) enum Outcome<C> {
    /// The rollout waits, saying for what.
    Waiting(String),
    Done {
        /// The promoted child as it is now.
        child: C,
        /// Something was written to it or its riders.
        changed: bool,
        /// Set when a strategy step leaves the rollout waiting, saying for what.
        pending: Option<String>,
        trace: Trace,
    },
}

pub(super) struct Acted<C> {
    pub outcome: Outcome<C>,
    /// When a deadline (a drain's expiry, an assessment's end) must wake the rollout.
    pub wake: Option<Timestamp>,
}

impl<C> Acted<C> {
    fn waiting(why: String, wake: Option<Timestamp>) -> Self {
        Acted {
            outcome: Outcome::Waiting(why),
            wake,
        }
    }
}

fn earliest(wake: &mut Option<Timestamp>, t: Timestamp) {
    *wake = Some(wake.map_or(t, |w| w.min(t)));
}

/// Carries out `plan`, keeping in the pass's status what it must record.
pub(super) async fn act<R: Rollout>(
    pass: &mut Pass<'_, R>,
    ctx: &Ctx,
    plan: PassPlan<R>,
) -> Result<Acted<R::Child>, Error> {
    let obj = pass.obj;
    for (child, reason) in &plan.retire {
        if reason == upgrade_state_reason::PURGE {
            warn!(child = %child.name_any(), "duplicate child in one upgrade state: purging the older one");
        }
        children::mark_recyclable(ctx, &**child, reason).await?;
    }
    let mut wake = None;
    for c in &plan.recycle {
        obj.recycle(ctx, c)
            .await?
            .inspect(|t| earliest(&mut wake, *t));
    }
    let generation_changed = plan.generation_changed;
    let mut trace = Trace::default();
    let (child, mut changed, pending) = match plan.promoted {
        Step::Wait(why) => return Ok(Acted::waiting(why, wake)),
        Step::Fail(e) => return Err(e),
        Step::Adopt(child) | Step::InSync(child) => (Arc::unwrap_or_clone(child), false, None),
        Step::Create {
            desired,
            name_count,
            discontinue,
        } => {
            trace.created = true;
            (
                create(ctx, &mut pass.st, desired, name_count, &discontinue).await?,
                true,
                None,
            )
        }
        Step::Update(mut u) => {
            trace.changed_fields = std::mem::take(&mut u.changed_fields);
            trace.promoted = u.live.name_any();
            let carried = update(pass, ctx, &mut wake, &trace, u).await?;
            trace.applied = carried.applied;
            (carried.child, carried.changed, carried.pending)
        }
    };
    trace.promoted = child.name_any();
    changed |= sync_riders(pass, ctx, &child, changed || generation_changed).await?;
    obj.ensure_companions(ctx, &child).await?;
    Ok(Acted {
        outcome: Outcome::Done {
            child,
            changed,
            pending,
            trace,
        },
        wake,
    })
}

/// Carries the rollout's spec to the promoted child: a progressive step, or the kind's own way.
async fn update<R: Rollout>(
    pass: &mut Pass<'_, R>,
    ctx: &Ctx,
    wake: &mut Option<Timestamp>,
    trace: &Trace,
    u: Update<R>,
) -> Result<Carried<R::Child>, Error> {
    let obj = pass.obj;
    let Update {
        live,
        desired,
        resolved,
        progressive,
        riders_progressive,
        ..
    } = u;
    let carry = if progressive {
        let mut until = None;
        let asked = super::progressive::Asked {
            resolved: &resolved,
            live: &*live,
            desired,
            riders_changed: riders_progressive,
        };
        let carry = super::progressive::pass(pass, ctx, asked, trace, &mut until).await?;
        until.inspect(|t| earliest(wake, *t));
        carry
    } else {
        obj.carry_update(ctx, &mut pass.st, &live, desired).await?
    };
    carry_out(obj, ctx, &live, carry).await
}

/// Creates the promoted child, after marking the trials it leaves without a promoted child
/// recyclable. The new `nameCount` reaches the API with the status written at the end of the
/// pass (also when the create fails): a crash between the create and that write is safe,
/// because the live list before every create adopts the child.
async fn create<C: ChildObject, S: RolloutStatus>(
    ctx: &Ctx,
    st: &mut S,
    desired: DesiredChild,
    name_count: i32,
    discontinue: &[Arc<C>],
) -> Result<C, Error> {
    for t in discontinue {
        children::mark_recyclable(ctx, &**t, upgrade_state_reason::DISCONTINUE_PROGRESSIVE).await?;
    }
    *st.name_count_mut() = Some(name_count);
    let created = children::create::<C>(ctx, &desired).await?;
    info!(child = %desired.name, "created child");
    // A pause-and-drain survives a recreate: the pipelines stay paused until the new child is
    // reconciled. Anything else starts afresh.
    if st.common().upgrade_in_progress != UpgradeStrategy::PipelinePauseAndDrain {
        st.common_mut().upgrade_in_progress = Default::default();
    }
    Ok(created)
}

/// The promoted child after its update.
struct Carried<C> {
    child: C,
    changed: bool,
    /// Changed in place by a direct apply (not by a strategy step).
    applied: bool,
    /// What the rollout waits for, when a strategy step leaves it pending.
    pending: Option<String>,
}

/// Finishes a strategy's answer: a child to apply directly is applied (after the kind's
/// preparation, e.g. a slow resume); a step taken is reported as it left the child.
async fn carry_out<R: Rollout>(
    obj: &R,
    ctx: &Ctx,
    live: &R::Child,
    carry: Carry<R::Child>,
) -> Result<Carried<R::Child>, Error> {
    Ok(match carry {
        Carry::Apply(desired) => {
            let changed = children::needs_apply(live, &desired);
            if changed {
                obj.before_update(ctx, live, &desired).await?;
                info!(child = %desired.name, "updating child");
            }
            Carried {
                child: children::apply::<R::Child>(ctx, live, &desired).await?,
                changed,
                applied: changed,
                pending: None,
            }
        }
        Carry::Prepared { child, pending } => Carried {
            changed: child.resource_version() != live.resource_version(),
            child,
            applied: false,
            pending,
        },
    })
}

/// Riders follow their child: synced whenever something changed (`force`), else now and then;
/// returns whether any was written. Status lists them in any case.
async fn sync_riders<R: Rollout>(
    pass: &mut Pass<'_, R>,
    ctx: &Ctx,
    child: &R::Child,
    force: bool,
) -> Result<bool, Error> {
    let (obj, ns, uid, st) = (pass.obj, &pass.ns, &pass.uid, &mut pass.st);
    let desired_riders = desired_riders(obj, ctx, child)?;
    // A progressive upgrade owns the riders until it is done (the promoted HPA is removed
    // while a trial runs).
    let progressing = st.common().upgrade_in_progress == UpgradeStrategy::Progressive;
    let mut changed = false;
    if !progressing && ctx.riders_due(uid, force) {
        changed = riders::sync(ctx, ns, child, st.riders(), &desired_riders).await?;
        ctx.riders_checked(uid);
    }
    // Said once per write of the riders, not on every pass.
    if changed {
        for r in &desired_riders {
            if let Some((field, asked)) = &r.namespace_ignored {
                let note = format!(
                    "{field}: namespace {asked:?} ignored: rider {} {} is created in the \
                     rollout's namespace {ns:?}",
                    r.gvk.kind, r.name
                );
                warn!(%note, "rider namespace ignored");
                publish(
                    &ctx.events,
                    obj,
                    EventType::Warning,
                    keys::event_reason::RIDER_NAMESPACE_IGNORED,
                    note,
                )
                .await;
            }
        }
    }
    *st.riders_mut() = numaplane_core::riders::rider_status(&desired_riders);
    Ok(changed)
}
