//! The reconcile loop shared by PipelineRollout, MonoVertexRollout and ISBServiceRollout:
//! observe (watch caches), decide, act (server-side apply), report (one status write).
//! What differs per kind sits behind the [`Rollout`] trait (`kind.rs`), implemented in
//! `pipeline.rs`, `monovertex.rs` and `isbservice.rs`; what the child should be is in
//! `desired.rs`, cache lookups in `lookup.rs`. The submodules never import this one: the loop
//! calls down into them, never the other way.

mod desired;
pub mod isbservice;
mod kind;
mod lookup;
pub mod monovertex;
pub mod pipeline;
pub mod progressive;
pub mod recycle;

use desired::{desired_child, desired_riders};
use kind::publish;
pub use kind::{Carry, Parts, Rollout};
use lookup::{find_promoted, is_promoted};

use crate::children::{self, ChildObject};
use crate::context::{Ctx, RESYNC};
use crate::error::Error;
use crate::finalizer;
use crate::riders;
use crate::status::{self, RolloutStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use numaplane_api::common::UpgradeStrategy;
use numaplane_api::keys::{self, labels, upgrade_state};
use std::sync::Arc;
use std::time::Duration;
use tracing::{Instrument, debug, info, info_span, warn};

/// How long to wait before re-checking while children are being deleted.
const DELETION_RECHECK: Duration = Duration::from_secs(2);
/// A child still there this long after its delete is reported as blocking the deletion.
const DELETION_SLOW: k8s_openapi::jiff::SignedDuration =
    k8s_openapi::jiff::SignedDuration::from_secs(60);
/// Re-check period while such a child holds up the deletion.
const DELETION_SLOW_RECHECK: Duration = Duration::from_secs(30);
/// Re-check period while an upgrade strategy is in progress (the reference's default requeue):
/// a safety net behind the watch triggers, e.g. for an allow-data-loss annotation added to
/// another rollout.
pub(crate) const IN_PROGRESS_RECHECK: Duration = Duration::from_secs(20);

/// Entry point used by the kube-runtime Controller.
pub async fn reconcile<R: Rollout>(obj: Arc<R>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let ns = obj.namespace().unwrap_or_default();
    let name = obj.name_any();
    let span = info_span!("reconcile", controller = R::CONTROLLER, namespace = %ns, name = %name);
    async move {
        // A standby keeps its caches warm but leaves the objects alone; it reconciles
        // everything the moment it becomes leader.
        if !ctx.is_leader() {
            return Ok(Action::await_change());
        }
        let started = std::time::Instant::now();
        // kube-runtime keeps no queue to measure: the reference's queue length counts the
        // PipelineRollout reconciles in progress.
        let _in_flight = (R::CONTROLLER == "pipeline-rollout-controller")
            .then(|| crate::metrics::InFlight::new(&ctx.metrics.pipeline_rollout_queue_length));
        let obj = status::fresher(&ctx, obj);
        let key = format!("{}/{}/{}", R::kind(&()), ns, name);
        let res = if obj.meta().deletion_timestamp.is_some() {
            finalize(&*obj, &ctx).await
        } else {
            run(&*obj, &ctx).await
        };
        let secs = started.elapsed().as_secs_f64();
        ctx.metrics
            .reconciled(R::CONTROLLER, secs, res.as_ref().err().map(Error::reason));
        match res {
            Ok(action) => {
                ctx.clear_failures(&key);
                Ok(action)
            }
            Err(e) => {
                let delay = ctx.backoff(&key);
                warn!(error = %e, reason = e.reason(), retry_in = ?delay, "reconcile failed");
                // A problem the user must fix is retried slowly: their edit wakes us anyway.
                let delay = if e.is_transient() {
                    delay
                } else {
                    delay.max(Duration::from_secs(60))
                };
                Ok(Action::requeue(delay))
            }
        }
    }
    .instrument(span)
    .await
}

/// Used by the Controller for errors escaping `reconcile` (none do: failures are reported in
/// status and retried with backoff from `reconcile` itself).
pub fn error_policy<R: Rollout>(_obj: Arc<R>, err: &Error, _ctx: Arc<Ctx>) -> Action {
    warn!(error = %err, "unexpected reconcile error");
    Action::requeue(Duration::from_secs(5))
}

/// One pass for a live (not deleting) rollout. Failures are written to status here. (Long:
/// the single place a pass's outcome becomes status, an Event and the next wake-up.)
async fn run<R: Rollout>(obj: &R, ctx: &Ctx) -> Result<Action, Error> {
    if !finalizer::has(obj) {
        // Remembered so a pass that starts before the watch shows the finalizer doesn't add
        // it again (a failed patch, and a wasted write).
        let added = finalizer::add(ctx, obj).await?;
        status::remember(ctx, &added);
    }
    let uid = obj.uid().unwrap_or_default();
    let before = obj.status_of().cloned().unwrap_or_default();
    // A status held back by an earlier pass is newer than the cached one.
    let mut st = ctx
        .status_holds
        .held::<R::Status>(&uid)
        .unwrap_or_else(|| before.clone());
    let generation = obj.meta().generation.unwrap_or_default();
    let now = status::now();
    let started = std::time::Instant::now();
    let strategy_before = st.common().upgrade_in_progress;
    let mut wake = None;
    let outcome = drive(obj, ctx, &mut st, generation, &now, &mut wake).await;
    let settling = matches!(
        outcome,
        Ok(Pass::Done { settling: true, .. } | Pass::Waiting(_))
    );
    let delay = match outcome {
        Ok(Pass::Done {
            changed,
            created,
            ref trace,
            ..
        }) => {
            st.common_mut().observed_generation = generation;
            record_history::<R>(ctx, &mut st, strategy_before, trace, generation, &now);
            if changed {
                let phase = if created { "create" } else { "update" };
                ctx.metrics
                    .child_change(R::CONTROLLER, phase, started.elapsed().as_secs_f64());
                // One Event per new child; routine updates show in status and metrics only
                // (an Event per update would double the writes of a mass update).
                if created {
                    ctx.events
                        .publish_once(
                            R::EVENT_SOURCE,
                            &obj.object_ref(&()),
                            EventType::Normal,
                            R::SUCCESS_EVENT,
                            "Reconciliation successful: child created".into(),
                        )
                        .await;
                }
            } else {
                debug!("in sync, nothing to do");
            }
            if st.common().upgrade_in_progress == Default::default() {
                RESYNC
            } else {
                IN_PROGRESS_RECHECK
            }
        }
        Ok(Pass::Waiting(message)) => {
            status::mark_pending(st.common_mut(), &message);
            st.common_mut().observed_generation = generation;
            RESYNC
        }
        Err(e) => {
            status::mark_failed(st.common_mut(), &e, &now);
            st.common_mut().observed_generation = generation;
            publish(
                &ctx.events,
                obj,
                EventType::Warning,
                keys::event_reason::RECONCILE_FAILED,
                format!("reconcile failed: {e}"),
            )
            .await;
            record_health::<R>(ctx, obj, st.common());
            obj.observe_metrics(ctx, &st, &now);
            status::write_if_changed(obj, ctx, &before, &st).await?;
            ctx.status_holds.release(&uid);
            return Err(e);
        }
    };
    record_health::<R>(ctx, obj, st.common());
    obj.observe_metrics(ctx, &st, &now);
    if before != st
        && settling
        && holdable::<R>(&before, &st)
        && let Some(left) = ctx.status_holds.hold(&uid, &st)
    {
        debug!(?left, "child settling; status write held back");
        return Ok(Action::requeue(left));
    }
    // Released only once written: a failed write keeps what the held status recorded.
    status::write_if_changed(obj, ctx, &before, &st).await?;
    ctx.status_holds.release(&uid);
    // A recycling deadline (expiry, failure wait) wakes the rollout exactly when it is due.
    let until_wake = wake.map(|w: Timestamp| {
        Duration::try_from(w.duration_since(status::now().0)).unwrap_or(Duration::ZERO)
            + Duration::from_millis(100)
    });
    Ok(Action::requeue(until_wake.map_or(delay, |w| w.min(delay))))
}

/// Whether a status change is only an observation that may wait for the child to settle: no
/// strategy starts, runs or ends in it (those are recorded before anything acts on them).
fn holdable<R: Rollout>(before: &R::Status, after: &R::Status) -> bool {
    let idle = |s: &R::Status| s.common().upgrade_in_progress == Default::default();
    // The name count and pod history are observations too (a new name is checked against a
    // live list before use; the history only sizes later drains).
    let durable = |s: &R::Status| numaplane_core::progressive::Record {
        name_count: None,
        historical_pod_count: None,
        ..R::read_record(s)
    };
    idle(before) && idle(after) && durable(before) == durable(after)
}

/// The one-hot health series of a rollout, and its count in its namespace.
fn record_health<R: Rollout>(ctx: &Ctx, obj: &R, st: &numaplane_api::common::Status) {
    let ns = obj.namespace().unwrap_or_default();
    let name = obj.name_any();
    let is_false = |t: &str| {
        numaplane_core::conditions::get_condition(&st.conditions, t)
            .is_some_and(|c| c.status == "False")
            .to_string()
    };
    let labels = vec![
        ("namespace", ns.clone()),
        (R::METRIC_LABEL, name.clone()),
        ("phase", st.phase.as_str().to_string()),
        (
            "promotedChildFailure",
            is_false(keys::condition::CHILD_RESOURCES_HEALTHY),
        ),
        (
            "progressiveFailure",
            is_false(keys::condition::PROGRESSIVE_UPGRADE_SUCCEEDED),
        ),
    ];
    let kind = children::kind_str::<R>();
    ctx.metrics.set_health(kind, &ns, &name, labels);
    ctx.metrics.count(kind, &ns, &name, true);
}

enum Pass {
    /// `settling`: the child has not caught up with its spec yet (its reaction is on its way).
    Done {
        changed: bool,
        created: bool,
        settling: bool,
        trace: Trace,
    },
    Waiting(String),
}

/// What a pass did to the promoted child, for the upgrade history.
#[derive(Default)]
struct Trace {
    promoted: String,
    created: bool,
    /// Updated in place (not by a strategy step).
    applied: bool,
    /// Where the promoted child differed from the rollout.
    changed_fields: Vec<String>,
}

/// Adds this pass to `status.upgradeHistory` (see [`numaplane_core::history`]).
fn record_history<R: Rollout>(
    ctx: &Ctx,
    st: &mut R::Status,
    strategy_before: UpgradeStrategy,
    trace: &Trace,
    generation: i64,
    now: &Time,
) {
    let record = R::read_record(st);
    let obs = numaplane_core::history::Observation {
        strategy_before,
        strategy_after: st.common().upgrade_in_progress,
        trial: record.upgrading.as_ref(),
        promoted: Some(&trace.promoted),
        created: trace.created,
        applied: trace.applied,
        generation,
        changed_fields: &trace.changed_fields,
    };
    let limit = ctx.settings.controller().upgrade_history_limit;
    numaplane_core::history::record(&mut st.common_mut().upgrade_history, &obs, now, limit);
}

async fn drive<R: Rollout>(
    obj: &R,
    ctx: &Ctx,
    st: &mut R::Status,
    generation: i64,
    now: &Time,
    wake: &mut Option<Timestamp>,
) -> Result<Pass, Error> {
    let ns = obj.namespace().unwrap_or_default();
    let name = obj.name_any();
    // Every child is labelled with its rollout's name: one that is no label value (object names
    // may be 253 characters) could never create a child, and each attempt took a new name.
    if !crate::children::valid_label_value(&name) {
        return Err(Error::InvalidSpec(format!(
            "metadata.name: {} characters, at most 63 can label its children ({})",
            name.chars().count(),
            numaplane_api::keys::labels::PARENT_ROLLOUT_NAME
        )));
    }
    let (meta, spec) = obj.child_template();
    R::validate(spec)?;
    if let Some(meta) = meta {
        let at = R::SPEC_PATH.strip_suffix(".spec").unwrap_or(R::SPEC_PATH);
        let meta = serde_json::to_value(meta).unwrap_or_default();
        numaplane_core::child::validate_applyable(&meta, &format!("{at}.metadata"))
            .map_err(|e| Error::InvalidSpec(e.to_string()))?;
    }
    if let Some(retired) = obj.retire_children(ctx).await? {
        return Ok(Pass::Waiting(retired));
    }
    *wake = garbage_collect(obj, ctx, &ns, &name).await?;
    let resolved = match obj.resolve(ctx).await? {
        Ok(r) => r,
        Err(waiting) => return Ok(Pass::Waiting(waiting)),
    };
    let generation_changed = st.common().observed_generation != generation;

    let mut trace = Trace::default();
    let (child, mut changed, created, pending) = match find_promoted::<R>(ctx, &ns, &name) {
        None => match create_promoted(obj, ctx, st, &resolved).await? {
            Promoted::Waiting(why) => return Ok(Pass::Waiting(why)),
            Promoted::Adopted(child) => (child, false, false, None),
            Promoted::Created(child) => (child, true, true, None),
        },
        Some(live) => {
            check_owned::<R>(obj, &live)?;
            let u = update_promoted(obj, ctx, st, &resolved, live, generation, now, wake).await?;
            trace.applied = u.applied;
            trace.changed_fields = u.changed_fields;
            (u.child, u.changed, false, u.pending)
        }
    };
    trace.promoted = child.name_any();
    trace.created = created;
    changed |= sync_riders(obj, ctx, st, &child, changed || generation_changed).await?;
    obj.ensure_companions(ctx, &child).await?;
    let settling = report_child::<R>(ctx, st, &child, pending.as_deref(), generation, now);
    Ok(Pass::Done {
        changed,
        created,
        settling: pending.is_none() && settling,
        trace,
    })
}

/// What [`create_promoted`] found or did.
enum Promoted<C> {
    /// Nothing can be created yet, for this reason.
    Waiting(String),
    /// A promoted child the cache did not know yet.
    Adopted(C),
    Created(C),
}

/// No promoted child in the cache: adopt the one a live list shows, or create it (a trial left
/// without a promoted child is discontinued first).
async fn create_promoted<R: Rollout>(
    obj: &R,
    ctx: &Ctx,
    st: &mut R::Status,
    resolved: &R::Resolved,
) -> Result<Promoted<R::Child>, Error> {
    let ns = obj.namespace().unwrap_or_default();
    let name = obj.name_any();
    let (metadata, spec) = obj.child_template();
    // A recreate replaces the child only once the old one is gone (and, for an ISB service,
    // once its pipelines are).
    if let Some(old) = recreating::<R>(ctx, &ns, &name) {
        return Ok(Promoted::Waiting(format!(
            "recreate: waiting for {} {old} to be deleted before creating its replacement",
            children::kind_str::<R::Child>(),
        )));
    }
    // A live list right before creating: a stale cache must never give a rollout two promoted
    // children.
    let live = children::list_live::<R::Child>(ctx, &ns, &name).await?;
    let taken: Vec<String> = live.iter().map(|c| c.name_any()).collect();
    // (A child being deleted is gone for our purposes: its replacement starts now.)
    if let Some(existing) = live
        .iter()
        .find(|c| is_promoted(c.meta()) && c.meta().deletion_timestamp.is_none())
    {
        return Ok(Promoted::Adopted(existing.clone()));
    }
    // A trial without a promoted child to judge it against is discontinued: the new promoted
    // child is built from the rollout as it is.
    for t in live.iter().filter(|c| {
        c.meta().deletion_timestamp.is_none()
            && matches!(
                c.labels().get(labels::UPGRADE_STATE).map(String::as_str),
                Some(upgrade_state::TRIAL) | Some(upgrade_state::IN_PROGRESS)
            )
    }) {
        children::mark_recyclable(ctx, t, keys::upgrade_state_reason::DISCONTINUE_PROGRESSIVE)
            .await?;
    }
    let child_name = allocate_name::<R>(&name, st, &taken)?;
    let desired = desired_child(obj, resolved, &child_name, metadata, spec)?;
    let created = children::create::<R::Child>(ctx, &desired).await?;
    info!(child = %child_name, "created child");
    // A pause-and-drain survives a recreate: the pipelines stay paused until the new child is
    // reconciled. Anything else starts afresh.
    if st.common().upgrade_in_progress != UpgradeStrategy::PipelinePauseAndDrain {
        st.common_mut().upgrade_in_progress = Default::default();
    }
    Ok(Promoted::Created(created))
}

/// What [`update_promoted`] left.
struct Updated<C> {
    child: C,
    changed: bool,
    /// Changed in place by a direct apply.
    applied: bool,
    /// Where the live child differed from the rollout (see [`changed_fields`]).
    changed_fields: Vec<String>,
    /// What the rollout waits for, when a strategy step leaves it pending.
    pending: Option<String>,
}

/// The promoted child brought to the rollout's spec: applied directly, or a step taken of the
/// strategy in progress (progressive, or the kind's own, e.g. pause-and-drain).
#[allow(clippy::too_many_arguments)] // The pass's inputs, passed through to the strategy.
async fn update_promoted<R: Rollout>(
    obj: &R,
    ctx: &Ctx,
    st: &mut R::Status,
    resolved: &R::Resolved,
    live: R::Child,
    generation: i64,
    now: &Time,
    wake: &mut Option<Timestamp>,
) -> Result<Updated<R::Child>, Error> {
    let (metadata, spec) = obj.child_template();
    let generation_changed = st.common().observed_generation != generation;
    let child_name = live.name_any();
    let mut desired = desired_child(obj, resolved, &child_name, metadata, spec)?;
    obj.adapt_to_live(&live, &mut desired);
    // A strategy in progress takes its next step even when nothing differs.
    let in_progress = st.common().upgrade_in_progress != Default::default();
    if !(generation_changed || in_progress || children::needs_apply(&live, &desired)) {
        return Ok(Updated {
            child: live,
            changed: false,
            applied: false,
            changed_fields: Vec::new(),
            pending: None,
        });
    }
    // Riders are compared with the cluster when the rollout changed, and on every pass of an
    // upgrade (a rider-only upgrade has nothing else to show for it).
    let progressing = st.common().upgrade_in_progress == UpgradeStrategy::Progressive;
    let riders = if generation_changed || progressing {
        progressive::rider_changes(obj, ctx, st, &live).await?
    } else {
        Vec::new()
    };
    let by_progressive = progressive::applies(obj, ctx, st, &live, &desired, &riders);
    let changed_fields = changed_fields(obj, &live, &desired, by_progressive, !riders.is_empty());
    let carry = if by_progressive {
        let riders_changed = progressive::riders_progressive(&riders);
        progressive::pass(
            obj,
            ctx,
            st,
            resolved,
            &live,
            desired,
            riders_changed,
            generation,
            now,
            wake,
        )
        .await?
    } else {
        obj.carry_update(ctx, st, &live, desired).await?
    };
    Ok(match carry {
        Carry::Apply(desired) => {
            let desired = *desired;
            let changed = children::needs_apply(&live, &desired);
            if changed {
                obj.before_update(ctx, &live, &desired).await?;
                info!(child = %child_name, "updating child");
            }
            Updated {
                child: children::apply::<R::Child>(ctx, &live, &desired).await?,
                changed,
                applied: changed,
                changed_fields,
                pending: None,
            }
        }
        Carry::Prepared { child, pending } => Updated {
            changed: child.resource_version() != live.resource_version(),
            child,
            applied: false,
            changed_fields,
            pending,
        },
    })
}

/// Where the promoted child differs from the rollout, as paths into the rollout: under
/// progressive without the scale the engine itself changes on the promoted child.
fn changed_fields<R: Rollout>(
    obj: &R,
    live: &R::Child,
    desired: &children::DesiredChild,
    progressive: bool,
    riders_changed: bool,
) -> Vec<String> {
    use numaplane_core::progressive::scale::comparable_promoted_spec;
    let mut fields = match obj.progressive_parts().filter(|_| progressive) {
        Some(p) => numaplane_core::history::changed_fields(
            R::SPEC_PATH,
            &comparable_promoted_spec(p.kind, live.spec()),
            &comparable_promoted_spec(p.kind, &desired.spec),
        ),
        None => numaplane_core::history::changed_fields(R::SPEC_PATH, live.spec(), &desired.spec),
    };
    let meta = R::SPEC_PATH.strip_suffix(".spec").unwrap_or(R::SPEC_PATH);
    for (what, want, have) in [
        ("labels", &desired.labels, live.labels()),
        ("annotations", &desired.annotations, live.annotations()),
    ] {
        fields.extend(
            want.iter()
                .filter(|(k, v)| have.get(*k) != Some(*v))
                .map(|(k, _)| format!("{meta}.metadata.{what}[{k:?}]")),
        );
    }
    if riders_changed {
        fields.push("spec.riders".into());
    }
    fields
}

/// Riders follow their child: synced whenever something changed (`force`), else now and then;
/// returns whether any was written. Status lists them in any case.
async fn sync_riders<R: Rollout>(
    obj: &R,
    ctx: &Ctx,
    st: &mut R::Status,
    child: &R::Child,
    force: bool,
) -> Result<bool, Error> {
    let ns = obj.namespace().unwrap_or_default();
    let uid = obj.uid().unwrap_or_default();
    let desired_riders = desired_riders(obj, ctx, child)?;
    // A progressive upgrade owns the riders until it is done (the promoted HPA is removed
    // while a trial runs).
    let progressing = st.common().upgrade_in_progress == UpgradeStrategy::Progressive;
    let mut changed = false;
    if !progressing && ctx.riders_due(&uid, force) {
        changed = riders::sync(ctx, &ns, child, st.riders(), &desired_riders).await?;
        ctx.riders_checked(&uid);
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

/// The child's part of the status: deployed or pending, its health and kind-specific fields.
/// Returns whether its reaction is still to come (Numaflow has yet to observe it, or it, or
/// something it needs like a pipeline's ISB service, is still coming up).
fn report_child<R: Rollout>(
    ctx: &Ctx,
    st: &mut R::Status,
    child: &R::Child,
    pending: Option<&str>,
    generation: i64,
    now: &Time,
) -> bool {
    match pending {
        Some(m) => status::mark_pending(st.common_mut(), m),
        None => status::mark_deployed(st.common_mut(), generation, now),
    }
    let health = R::health(ctx, child);
    status::set_health(st.common_mut(), &health, generation, now);
    R::observe_child(st, child, generation, now);
    health.reason == keys::reason::PROGRESSING
        || not_yet_observed(child)
        || R::still_coming_up(ctx, child)
}

/// Whether the child's controller has yet to observe its current generation (a new MonoVertex
/// reads as "Unknown" rather than "Progressing" until Numaflow first writes its status).
fn not_yet_observed<C: ChildObject>(child: &C) -> bool {
    let observed = child
        .status()
        .and_then(|s| s.get("observedGeneration"))
        .and_then(serde_json::Value::as_i64)
        .unwrap_or(0);
    observed < child.meta().generation.unwrap_or(0)
}

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

/// Allocates the next child name not in `taken` (the live children, listed just before). The
/// allocation reaches the API with the status written at the end of the pass (also when the
/// create fails), not in a write of its own: a crash between the create and that write is safe,
/// because the live list before every create adopts the child.
fn allocate_name<R: Rollout>(
    name: &str,
    st: &mut R::Status,
    taken: &[String],
) -> Result<String, Error> {
    // Bounded: at most 1000 indices exist.
    for _ in 0..1000 {
        let (index, next) = numaplane_core::naming::allocate_index(*st.name_count());
        *st.name_count_mut() = Some(next);
        let candidate = numaplane_core::naming::child_name(name, index);
        if !taken.contains(&candidate) {
            return Ok(candidate);
        }
    }
    Err(Error::InvalidSpec(format!(
        "no free child name for {name}: all 1000 indices are taken"
    )))
}

/// The child being deleted and recreated (`recyclable`, reason `delete-recreate`), if any.
fn recreating<R: Rollout>(ctx: &Ctx, ns: &str, rollout: &str) -> Option<String> {
    lookup::cached_children::<R>(ctx, ns, rollout)
        .find(|c| {
            let l = c.labels();
            l.get(labels::UPGRADE_STATE).map(String::as_str) == Some(upgrade_state::RECYCLABLE)
                && l.get(labels::UPGRADE_STATE_REASON).map(String::as_str)
                    == Some(keys::upgrade_state_reason::DELETE_RECREATE)
        })
        .map(|c| c.name_any())
}

/// The upgrade state a duplicate is counted under (`in-progress` is the legacy `trial`).
fn purge_group(state: Option<&str>) -> Option<&'static str> {
    match state {
        Some(upgrade_state::PROMOTED) => Some(upgrade_state::PROMOTED),
        Some(upgrade_state::TRIAL | upgrade_state::IN_PROGRESS) => Some(upgrade_state::TRIAL),
        _ => None,
    }
}

/// Several children in one state (two promoted, two trials: a crash between two writes, a hand
/// edit): all but the newest are marked recyclable with reason `purge`, as the reference does.
/// Seen in the cache, confirmed by a live list, so a label flip the cache has not caught up
/// with is never taken for a duplicate. Only children this rollout controls count: an object
/// of someone else's carrying our labels never makes one of ours go.
async fn purge_duplicates<R: Rollout>(
    obj: &R,
    ctx: &Ctx,
    ns: &str,
    rollout: &str,
) -> Result<(), Error> {
    let uid = obj.uid().unwrap_or_default();
    let duplicates = |children: Vec<R::Child>| -> Vec<R::Child> {
        let mut groups: std::collections::BTreeMap<&'static str, Vec<R::Child>> =
            Default::default();
        for c in children {
            let ours = c
                .owner_references()
                .iter()
                .any(|o| o.controller == Some(true) && o.uid == uid);
            let state = purge_group(c.labels().get(labels::UPGRADE_STATE).map(String::as_str));
            if let Some(g) = state
                && ours
                && c.meta().deletion_timestamp.is_none()
            {
                groups.entry(g).or_default().push(c);
            }
        }
        groups
            .into_values()
            .flat_map(|mut g| {
                g.sort_by_key(|c| {
                    (
                        c.meta().creation_timestamp.as_ref().map(|t| t.0),
                        c.name_any(),
                    )
                });
                g.pop();
                g
            })
            .collect()
    };
    let cached: Vec<R::Child> = lookup::cached_children::<R>(ctx, ns, rollout)
        .map(|c| (*c).clone())
        .collect();
    if duplicates(cached).is_empty() {
        return Ok(());
    }
    let live = children::list_live::<R::Child>(ctx, ns, rollout).await?;
    for c in duplicates(live) {
        warn!(child = %c.name_any(), "duplicate child in one upgrade state: purging the older one");
        children::mark_recyclable(ctx, &c, keys::upgrade_state_reason::PURGE).await?;
    }
    Ok(())
}

/// Takes one recycling step for each of the rollout's `recyclable` children; returns the
/// earliest time one of them must be looked at again.
async fn garbage_collect<R: Rollout>(
    obj: &R,
    ctx: &Ctx,
    ns: &str,
    rollout: &str,
) -> Result<Option<Timestamp>, Error> {
    purge_duplicates(obj, ctx, ns, rollout).await?;
    let mut wake: Option<Timestamp> = None;
    for c in lookup::cached_children::<R>(ctx, ns, rollout) {
        if c.labels().get(labels::UPGRADE_STATE).map(String::as_str)
            != Some(upgrade_state::RECYCLABLE)
            || c.meta().deletion_timestamp.is_some()
        {
            continue;
        }
        if let Some(t) = obj.recycle(ctx, &c).await? {
            wake = Some(wake.map_or(t, |w| w.min(t)));
        }
    }
    Ok(wake)
}

/// Deletion: remove every child, then the finalizer.
async fn finalize<R: Rollout>(obj: &R, ctx: &Ctx) -> Result<Action, Error> {
    if !finalizer::has(obj) {
        return Ok(Action::await_change());
    }
    let ns = obj.namespace().unwrap_or_default();
    let name = obj.name_any();
    let live = children::list_live::<R::Child>(ctx, &ns, &name).await?;
    if !live.is_empty() {
        let now = Timestamp::now();
        let mut blocked = Vec::new();
        for c in &live {
            match &c.meta().deletion_timestamp {
                None => {
                    info!(child = %c.name_any(), "deleting child of deleted rollout");
                    children::delete::<R::Child>(ctx, &ns, &c.name_any(), c.uid()).await?;
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
    ctx.metrics.forget(children::kind_str::<R>(), &ns, &name);
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
