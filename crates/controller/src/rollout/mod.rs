//! The reconcile loop shared by PipelineRollout, MonoVertexRollout and ISBServiceRollout. One
//! pass is four steps, each in its own module:
//!
//! 1. [`observe`]: the rollout, its children, what they depend on and the config, in one value,
//!    from the watch caches plus the live reads the safety rules require.
//! 2. [`plan`]: the decisions, without I/O, by [`numaplane_core::pass::plan`] (the rollout's own
//!    checks come first, before anything is read).
//! 3. [`act`]: the plan carried out in its order (a strategy it hands the promoted child to
//!    records its state before it acts).
//! 4. [`report`]: status written once, Events, metrics and the next wake-up.
//!
//! A [`pass::Pass`] carries what the pass is about (the rollout, its namespace, name, uid,
//! generation and time) through the four, and is the only way a pass writes status.
//!
//! What differs per kind sits behind the [`Rollout`] trait (`kind.rs`), implemented in
//! `pipeline.rs`, `monovertex.rs` and `isbservice.rs`; what the child should be is in
//! `desired.rs`, cache lookups in `lookup.rs`. The submodules never import this one: the loop
//! calls down into them, never the other way.

mod act;
mod deletion;
mod desired;
pub mod isbservice;
mod kind;
mod lookup;
pub mod monovertex;
mod observation;
mod observe;
mod pass;
pub mod pipeline;
pub(crate) mod placement;
mod plan;
pub mod progressive;
pub mod recycle;
mod report;

use kind::publish;
pub use kind::{Carry, Parts, Rollout};
use numaplane_api::Namespaced;
pub(crate) use report::IN_PROGRESS_RECHECK;

use crate::children::{self, ChildObject};
use crate::context::Ctx;
use crate::error::Error;
use crate::finalizer;
use crate::reconcile::Ran;
use crate::status;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use numaplane_api::Kind;
use numaplane_api::keys;
use std::sync::Arc;
use std::time::Duration;
use tracing::{info, warn};

/// How long to wait before re-checking while children are being deleted.
const DELETION_RECHECK: Duration = Duration::from_secs(2);
/// A child still there this long after its delete is reported as blocking the deletion.
const DELETION_SLOW: k8s_openapi::jiff::SignedDuration =
    k8s_openapi::jiff::SignedDuration::from_secs(60);
/// Re-check period while such a child holds up the deletion.
const DELETION_SLOW_RECHECK: Duration = Duration::from_secs(30);
/// Entry point used by the kube-runtime Controller.
pub async fn reconcile<R: Rollout>(obj: Arc<R>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let cx = ctx.clone();
    crate::reconcile::around(&cx, obj, |obj, started| async move {
        let uid = obj.uid().unwrap_or_default();
        // A pass of this rollout from the due steps' lane is under way: this one comes after.
        let Some(in_pass) = ctx.due_steps.begin(&uid, started) else {
            return Ran::Aside(Action::requeue(crate::due_steps::STEP_ASIDE));
        };
        if let Some(late) = in_pass.took_due_step {
            ctx.metrics
                .due_step_delay
                .get_or_create(&vec![
                    ("controller", R::KIND.controller().to_string()),
                    (
                        "path",
                        if in_pass.by_lane { "lane" } else { "worker" }.into(),
                    ),
                ])
                .observe(late.as_secs_f64());
        }
        // kube-runtime keeps no queue to measure: the reference's queue length counts the
        // PipelineRollout reconciles in progress.
        let _in_flight = (R::KIND == Kind::Pipeline)
            .then(|| crate::metrics::InFlight::new(&ctx.metrics.pipeline_rollout_queue_length));
        Ran::Pass(if obj.meta().deletion_timestamp.is_some() {
            finalize(&*obj, &ctx).await
        } else {
            run(&*obj, &ctx).await
        })
    })
    .await
}

/// A cached rollout that does not parse into its type (something the API server's schema lets
/// through and ours refuses): said in a Warning Event and the log, and left alone until it
/// changes. `regarding` is the cached object.
pub async fn unreadable<R: Rollout>(
    regarding: &impl Resource<DynamicType = ()>,
    err: &numaplane_api::compact::Unreadable,
    ctx: &Ctx,
) -> Action {
    let name = regarding.meta().name.clone().unwrap_or_default();
    warn!(controller = R::KIND.controller(), %name, error = %err, "rollout does not parse; not reconciled");
    ctx.events
        .publish(
            R::KIND.event_source(),
            &regarding.object_ref(&()),
            EventType::Warning,
            "InvalidSpec",
            format!(
                "{} {name} cannot be read: {}",
                R::kind(&()),
                numaplane_api::compact::describe(err)
            ),
        )
        .await;
    Action::await_change()
}

/// One pass for a live (not deleting) rollout: observe, plan, act, report.
async fn run<R: Rollout>(obj: &R, ctx: &Ctx) -> Result<Action, Error> {
    // A pass creates children only once the finalizer is on, and the finalizer comes off only
    // when no child is left; so when this pass's patch finds it absent, no pass before this
    // one created a child, and observe may trust an empty cache without a live list.
    let first = !finalizer::has(obj);
    if first {
        // Remembered so a pass that starts before the watch shows the finalizer doesn't add
        // it again (a failed patch, and a wasted write).
        let added = finalizer::add(ctx, obj).await?;
        status::remember(ctx, &added);
    }
    let mut pass = pass::Pass::begin(obj, ctx);
    let acted = async {
        plan::validate(obj)?;
        let seen = observe::observe(&pass, ctx, first).await?;
        // A count corrected past a live child is kept (see `naming::count_past_live`).
        if seen.name_count != *crate::status::RolloutStatus::name_count(&pass.st) {
            *crate::status::RolloutStatus::name_count_mut(&mut pass.st) = seen.name_count;
        }
        let plan = plan::plan(&pass, seen)?;
        act::act(&mut pass, ctx, plan).await
    }
    .await;
    pass.finish(ctx, acted).await
}

/// Deletion: wait for what the kind's deletion guard asks (`deletion.rs`), remove every child,
/// then the finalizer.
async fn finalize<R: Rollout>(obj: &R, ctx: &Ctx) -> Result<Action, Error> {
    if !finalizer::has(obj) {
        return Ok(Action::await_change());
    }
    let ns = obj.ns();
    let name = obj.name_any();
    let live = children::list_live::<R::Child>(ctx, ns, &name).await?;
    if let Some(wait) = deletion::guard(obj, ctx, &live).await? {
        return Ok(wait);
    }
    if !live.is_empty() {
        let now = Timestamp::now();
        let mut blocked = Vec::new();
        for c in &live {
            match &c.meta().deletion_timestamp {
                None => {
                    info!(child = %c.name_any(), "deleting child of deleted rollout");
                    children::delete::<R::Child>(ctx, ns, &c.name_any(), c.uid()).await?;
                }
                Some(since) if now.duration_since(since.0) > DELETION_SLOW => {
                    blocked.push(deletion_blocked(c))
                }
                Some(_) => {}
            }
        }
        if blocked.is_empty() {
            return Ok(Action::requeue(DELETION_RECHECK));
        }
        // Someone else's finalizer: say so (the user may have to act), and look again less
        // often; the child's own deletion wakes us anyway.
        let note = blocked.join("; ");
        warn!(%note, "deletion waits for a child");
        publish(
            &ctx.events,
            obj,
            EventType::Warning,
            keys::event_reason::CHILD_DELETION_BLOCKED,
            note,
        )
        .await;
        return Ok(Action::requeue(DELETION_SLOW_RECHECK));
    }
    finalizer::remove(ctx, obj).await?;
    if let Some(uid) = obj.uid() {
        ctx.forget(&uid);
    }
    ctx.metrics
        .forget(numaplane_api::Subject::Rollout(R::KIND), ns, &name);
    info!("children deleted, finalizer removed");
    Ok(Action::await_change())
}

/// What holds up the deletion of child `c`: whose finalizers remain and what its status says.
fn deletion_blocked<C: ChildObject>(c: &C) -> String {
    let since = c
        .meta()
        .deletion_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
        .unwrap_or_default();
    let status = c
        .status()
        .and_then(|s| s.get("message"))
        .and_then(serde_json::Value::as_str)
        .filter(|m| !m.is_empty())
        .map(|m| format!("; its status says: {m}"))
        .unwrap_or_default();
    format!(
        "{} {} deleted at {since} is still there: its finalizers {:?} are its own controller's to remove{status}",
        C::kind(&()),
        c.name_any(),
        c.finalizers()
    )
}
