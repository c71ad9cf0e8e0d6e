//! The NumaflowControllerRollout reconciler: keeps a NumaflowController of the same name at the
//! rollout's `{version, instanceID}`, reports its health, and on deletion keeps the Numaflow
//! controller running until no PipelineRollout or ISBServiceRollout is left in the namespace
//! (their Pipelines and ISB services need it to clear their finalizers).

use super::nc_ctx::NcCtx;
use crate::error::{Error, KubeContext};
use crate::pause_requests::{Need, PauseCheck, check_pipelines};
use crate::reconcile::Ran;
use crate::{finalizer, metrics::Labels, status};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ListParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use numaplane_api::Namespaced;
use numaplane_api::common::UpgradeStrategy;
use numaplane_api::keys::{condition, event_reason, upgrade_state};
use numaplane_api::progressive::AssessmentResult;
use numaplane_api::{
    ISBServiceRollout, NumaflowController, NumaflowControllerRollout,
    NumaflowControllerRolloutStatus, NumaflowControllerSpec, PipelineRollout,
};
use numaplane_api::{Kind, Subject};
use numaplane_core::conditions::set_condition;
use numaplane_core::config::UserStrategy;
use numaplane_core::controller_health::{Reported, mirror_controller};
use numaplane_core::controller_rollout::{self, Found, Step};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::info;

/// This controller's subject: NumaflowControllerRollouts.
const SUBJECT: Subject = Subject::Rollout(Kind::NumaflowController);
/// How often a deletion blocked by remaining rollouts is re-checked (as in the reference).
const DELETION_RECHECK: Duration = Duration::from_secs(5);

pub async fn reconcile(
    r: Arc<NumaflowControllerRollout>,
    nctx: Arc<NcCtx>,
) -> Result<Action, Error> {
    let ctx = nctx.ctx.clone();
    crate::reconcile::around(
        &ctx,
        r,
        |r, _| async move { Ran::Pass(run(&r, &nctx).await) },
    )
    .await
}

async fn run(r: &NumaflowControllerRollout, nctx: &NcCtx) -> Result<Action, Error> {
    let ctx = &nctx.ctx;
    let ns = r.ns();
    let deleting = r.meta().deletion_timestamp.is_some();
    let remaining = if deleting {
        if !finalizer::has(r) {
            return Ok(Action::await_change());
        }
        let remaining = remaining_rollouts(nctx, ns).await?;
        if remaining.is_none() {
            return delete_controller(r, nctx).await;
        }
        remaining
    } else {
        if !finalizer::has(r) {
            let added = finalizer::add(ctx, r).await?;
            crate::status::remember(ctx, &added);
        }
        None
    };

    let before = r.status.clone().unwrap_or_default();
    let mut st = before.clone();
    let mut ledger = status::Ledger::new(before.clone());
    let generation = r.meta().generation.unwrap_or_default();
    let now = status::now();
    let started = Instant::now();
    let result = ensure_controller(r, nctx, &mut st, &mut ledger, generation, &now).await;
    st.status.observed_generation = generation;
    status::note_usde_config(
        &mut st.status,
        Kind::NumaflowController,
        ctx.settings.usde().is_some(),
        ctx.settings.user_strategy(ns),
        generation,
        &now,
    );
    if let Ok((phase, fields)) = &result {
        let strategy_before = before.status.upgrade_in_progress;
        record_history(r, nctx, &mut st, strategy_before, *phase, fields, &now);
    }
    match result.map(|(phase, _)| phase) {
        Ok(Some(phase)) => {
            ctx.metrics
                .child_change(SUBJECT.controller(), phase, started.elapsed().as_secs_f64());
            publish(
                nctx,
                r,
                EventType::Normal,
                event_reason::RECONCILATION_SUCCESSFUL,
                "Reconciliation successful".into(),
            )
            .await;
        }
        Ok(None) => {}
        Err(e) => {
            status::mark_failed(&mut st.status, &e, &now);
            publish(
                nctx,
                r,
                EventType::Warning,
                event_reason::RECONCILE_FAILED,
                format!("reconcile failed: {e}"),
            )
            .await;
            record_metrics(nctx, r, &st);
            ledger.write(r, ctx, &st).await?;
            return Err(e);
        }
    }
    let action = match remaining {
        Some(waiting) => {
            // The Numaflow controller must outlive the Pipelines and ISB services it finalizes.
            let msg = format!(
                "deletion waits until {waiting} in namespace {ns} are deleted; the Numaflow controller keeps running until then"
            );
            if before.status.message != msg {
                info!(%waiting, "deletion blocked by remaining rollouts");
                publish(
                    nctx,
                    r,
                    EventType::Normal,
                    event_reason::DELETING,
                    msg.clone(),
                )
                .await;
            }
            st.status.message = msg;
            Action::requeue(DELETION_RECHECK)
        }
        None if st.status.upgrade_in_progress != UpgradeStrategy::NoOp => {
            Action::requeue(crate::rollout::IN_PROGRESS_RECHECK)
        }
        None => Action::requeue(crate::context::RESYNC),
    };
    record_metrics(nctx, r, &st);
    ledger.write(r, ctx, &st).await?;
    Ok(action)
}

/// Adds this pass to `status.upgradeHistory`: `phase` is what [`ensure_controller`] wrote.
fn record_history(
    r: &NumaflowControllerRollout,
    nctx: &NcCtx,
    st: &mut NumaflowControllerRolloutStatus,
    strategy_before: UpgradeStrategy,
    phase: Option<&str>,
    changed_fields: &[String],
    now: &Time,
) {
    // A controller trial is recorded as a progressive attempt of its NumaflowController.
    let progressive = st.progressive_status.as_ref();
    let trial = progressive
        .and_then(|p| p.upgrading_controller_status.as_ref())
        .map(|u| numaplane_api::progressive::UpgradingChildStatus {
            name: u.controller.name.clone(),
            assessment_result: u.assessment_result,
            failure_reasons: u.failure_reasons.clone(),
            ..Default::default()
        });
    let promoted = progressive
        .and_then(|p| p.promoted_controller_status.as_ref())
        .map(|p| p.name.clone())
        .unwrap_or_else(|| r.name_any());
    let version_field = ["spec.controller.version".to_string()];
    let obs = numaplane_core::history::Observation {
        strategy_before,
        strategy_after: st.status.upgrade_in_progress,
        promoted: Some(&promoted),
        created: phase == Some("create"),
        applied: phase == Some("update"),
        generation: r.meta().generation.unwrap_or_default(),
        changed_fields: if trial.is_some() {
            &version_field
        } else {
            changed_fields
        },
        trial: trial.as_ref(),
    };
    let limit = nctx.ctx.settings.controller().upgrade_history_limit;
    let before = st.status.upgrade_history.clone();
    numaplane_core::history::record(&mut st.status.upgrade_history, &obs, now, limit);
    nctx.ctx.metrics.upgrades_finished(
        Kind::NumaflowController,
        r.ns(),
        &r.name_any(),
        &before,
        &st.status.upgrade_history,
    );
}

/// Creates or updates the NumaflowController and mirrors it into the rollout's status.
/// Returns the duration phase (`create` / `update`) when it wrote the NumaflowController, and
/// the fields in which it differed from the rollout (for the upgrade history).
async fn ensure_controller(
    r: &NumaflowControllerRollout,
    nctx: &NcCtx,
    st: &mut NumaflowControllerRolloutStatus,
    ledger: &mut status::Ledger<NumaflowControllerRolloutStatus>,
    generation: i64,
    now: &Time,
) -> Result<(Option<&'static str>, Vec<String>), Error> {
    let ctx = &nctx.ctx;
    let ns = r.ns();
    // The CRD refuses such an ID; one stored before it did is refused here, naming the field.
    if let Some(problem) = numaplane_core::naming::instance_id_problem(
        r.spec.controller.instance_id.as_deref(),
        "spec.controller.instanceID",
    ) {
        return Err(Error::InvalidSpec(problem));
    }
    let desired = NumaflowControllerSpec {
        version: r.spec.controller.version.clone(),
        instance_id: r.spec.controller.instance_id.clone(),
    };
    // Opt-in: a rollout without `spec.strategy.progressive` upgrades in place under
    // `progressive`, as the reference does (and its scenarios expect).
    let progressive = ctx.settings.user_strategy(ns) == UserStrategy::Progressive
        && r.spec
            .strategy
            .as_ref()
            .is_some_and(|s| s.progressive.is_some());
    if (progressive || st.progressive_status.is_some())
        && let Some(out) =
            super::trial::pass(r, nctx, st.progressive_status.as_ref(), progressive, now).await?
    {
        return progressive_step(r, nctx, st, ledger, out, generation, now).await;
    }
    carry(r, nctx, st, &desired, generation, now).await
}

/// What a pass without a controller trial decides on.
struct Observed {
    /// The NumaflowController in the cache.
    cached: Option<Arc<NumaflowController>>,
    /// When none is cached: the live read before a create.
    live: Option<NumaflowController>,
    /// While a pause-and-drain waits to update it: the namespace's pipelines.
    check: Option<PauseCheck>,
}

/// Observes the rollout's NumaflowController: the cache, a live read before a create (never
/// take over a NumaflowController we don't own), the namespace's pipelines while a pause waits
/// to update it.
async fn observe(
    r: &NumaflowControllerRollout,
    nctx: &NcCtx,
    desired: &NumaflowControllerSpec,
    pausing: bool,
) -> Result<Observed, Error> {
    let ctx = &nctx.ctx;
    let (ns, name) = (r.ns(), r.name_any());
    let uid = r.uid().unwrap_or_default();
    let cached = nctx
        .controllers
        .get(&ObjectRef::new(&name).within(ns))
        .map(|nc| status::fresher(ctx, nc));
    let (live, check) = match &cached {
        Some(nc) if nc.meta().deletion_timestamp.is_some() => (None, None),
        Some(nc) => {
            check_owned(nc, &uid, ns)?;
            let check = if pausing && nc.spec != *desired {
                Some(check_pipelines(ctx, ns, None, Need::Paused).await?)
            } else {
                None
            };
            (None, check)
        }
        None => {
            let api: Api<NumaflowController> = Api::namespaced(ctx.client.clone(), ns);
            let live = api
                .get_opt(&name)
                .await
                .ctx(|| format!("reading NumaflowController {name}"))?;
            if let Some(existing) = &live {
                check_owned(existing, &uid, ns)?;
            }
            (live, None)
        }
    };
    Ok(Observed {
        cached,
        live,
        check,
    })
}

/// One pass without a controller trial: observe, plan (`numaplane_core::controller_rollout`),
/// act, report. Returns what [`ensure_controller`] does.
async fn carry(
    r: &NumaflowControllerRollout,
    nctx: &NcCtx,
    st: &mut NumaflowControllerRolloutStatus,
    desired: &NumaflowControllerSpec,
    generation: i64,
    now: &Time,
) -> Result<(Option<&'static str>, Vec<String>), Error> {
    let ctx = &nctx.ctx;
    let (ns, name) = (r.ns(), r.name_any());
    let pausing = st.status.upgrade_in_progress == UpgradeStrategy::PipelinePauseAndDrain;
    let Observed {
        cached,
        live,
        check,
    } = observe(r, nctx, desired, pausing).await?;
    let fields = cached.as_ref().map_or_else(Vec::new, |nc| {
        let as_json = |s: &NumaflowControllerSpec| serde_json::to_value(s).unwrap_or_default();
        numaplane_core::history::changed_fields(
            "spec.controller",
            &as_json(&nc.spec),
            &as_json(desired),
        )
    });
    // Plan.
    let usde = ctx.settings.usde();
    let found = match (&cached, &live) {
        (Some(nc), _) if nc.meta().deletion_timestamp.is_some() => Found::Deleting,
        (Some(nc), _) => Found::Cached {
            controller: &**nc,
            spec: &nc.spec,
            labelled: super::child::labelled(nc, r, upgrade_state::PROMOTED),
            reconciled: controller_rollout::reconciled(nc),
        },
        (None, live) => Found::Live(live.as_ref().map(|nc| (nc, &nc.spec))),
    };
    let step = controller_rollout::plan(controller_rollout::Input {
        name: &name,
        namespace: ns,
        desired,
        found,
        pausing,
        not_paused: check.as_ref().map(|c| c.waiting.as_slice()),
        user_strategy: ctx.settings.user_strategy(ns),
        usde: usde.as_ref().map(|u| u.for_kind(Kind::NumaflowController)),
    });
    // Act: each step leaves the NumaflowController's health to mirror.
    let apply = || super::child::apply(r, nctx, &name, desired, upgrade_state::PROMOTED);
    let (reported, phase, pending) = match step {
        Step::AwaitDeletion(why) => {
            // Its deletion wakes us; then it is created again.
            status::mark_pending(&mut st.status, &why);
            return Ok((None, fields));
        }
        Step::Keep {
            controller,
            pending,
        } => (mirror_controller(controller), None, pending),
        Step::Write(write) => {
            info!(version = %desired.version, ?write, "writing NumaflowController");
            (mirror_controller(&apply().await?), write.phase(), None)
        }
        Step::StartPause {
            controller,
            pending,
        } => {
            info!(to = %desired.version, "pause-and-drain: requesting a pause of the namespace's pipelines");
            st.status.upgrade_in_progress = UpgradeStrategy::PipelinePauseAndDrain;
            (mirror_controller(controller), None, Some(pending))
        }
        Step::UpdatePaused { pending } => {
            info!(to = %desired.version, "pause-and-drain: pipelines paused, updating NumaflowController");
            let written = mirror_controller(&apply().await?);
            let paused = check.as_ref().map(|c| c.describe(Need::Paused));
            publish(
                nctx,
                r,
                EventType::Normal,
                event_reason::PIPELINES_PAUSED,
                format!(
                    "pipelines of namespace {ns}: {}; updating NumaflowController {name} to {}",
                    paused.unwrap_or_default(),
                    desired.version
                ),
            )
            .await;
            (written, Some("update"), Some(pending))
        }
        Step::ReleasePause(controller) => {
            info!("pause-and-drain: NumaflowController reconciled, pause released");
            st.status.upgrade_in_progress = UpgradeStrategy::NoOp;
            (mirror_controller(controller), None, None)
        }
    };
    // Report.
    report_controller(st, pending.as_deref(), reported, generation, now);
    crate::pause_requests::report(
        &mut st.status,
        &mut st.pause_request_status,
        generation,
        now,
    );
    Ok((phase, fields))
}

/// Records and carries out one pass of a progressive controller upgrade
/// (docs/progressive-numaflow-controller.md), and mirrors the promoted controller.
async fn progressive_step(
    r: &NumaflowControllerRollout,
    nctx: &NcCtx,
    st: &mut NumaflowControllerRolloutStatus,
    ledger: &mut status::Ledger<NumaflowControllerRolloutStatus>,
    out: super::trial::Outcome,
    generation: i64,
    now: &Time,
) -> Result<(Option<&'static str>, Vec<String>), Error> {
    let super::trial::Outcome { plan, promoted } = out;
    // A rollout that never ran a controller trial records nothing: its workloads keep their
    // own instance annotations.
    let quiet = st.progressive_status.is_none()
        && plan.status.upgrading_controller_status.is_none()
        && plan.actions.is_empty();
    if !quiet {
        st.progressive_status = Some(plan.status.clone());
        if !plan.actions.is_empty() && ledger.on_server() != st {
            // Record before act: a trial's name is known before it is created.
            ledger.record_before_acting(r, &nctx.ctx, st).await?;
        }
    }
    super::trial::act(r, nctx, &plan.actions, promoted.as_deref()).await?;
    if let Some(verdict) = plan.verdict {
        let u = plan.status.upgrading_controller_status.as_ref();
        let (name, version) = u
            .map(|u| (u.controller.name.clone(), u.controller.version.clone()))
            .unwrap_or_default();
        let (t, reason, note) = if verdict == AssessmentResult::Success {
            (
                EventType::Normal,
                condition::PROGRESSIVE_UPGRADE_SUCCEEDED,
                format!(
                    "trial Numaflow controller {name} ({version}) succeeded; promoting its workloads"
                ),
            )
        } else {
            (
                EventType::Warning,
                event_reason::PROGRESSIVE_UPGRADE_FAILED,
                format!(
                    "trial Numaflow controller {name} ({version}) failed: {}",
                    u.map(|u| u.failure_reasons.join("; ")).unwrap_or_default()
                ),
            )
        };
        publish(nctx, r, t, reason, note).await;
    }
    st.status.upgrade_in_progress = if plan.waiting_for.is_some() {
        UpgradeStrategy::Progressive
    } else {
        UpgradeStrategy::NoOp
    };
    report_verdict(st, &plan, generation, now);
    let reported = promoted.as_deref().map_or_else(
        || {
            Reported::new(
                numaplane_core::health::HealthStatus::False,
                numaplane_api::keys::reason::PROGRESSING,
                "the promoted NumaflowController is not in the cache yet",
            )
        },
        mirror_controller,
    );
    report_controller(st, plan.waiting_for.as_deref(), reported, generation, now);
    // An in-place update of the promoted controller (no trial wanted) is an ordinary update.
    let updated = plan
        .actions
        .iter()
        .any(|a| matches!(a, numaplane_core::controller_trial::Action::Update(_)));
    Ok(if updated {
        (Some("update"), vec!["spec.controller.version".to_string()])
    } else {
        (None, Vec::new())
    })
}

/// The rollout's phase (pending with what it waits for, else deployed) and its
/// `ChildResourcesHealthy`, mirrored from the controller it runs.
fn report_controller(
    st: &mut NumaflowControllerRolloutStatus,
    pending: Option<&str>,
    reported: Reported,
    generation: i64,
    now: &Time,
) {
    match pending {
        Some(m) => status::mark_pending(&mut st.status, m),
        None => status::mark_deployed(&mut st.status, generation, now),
    }
    set_condition(
        &mut st.status.conditions,
        condition::CHILD_RESOURCES_HEALTHY,
        reported.status,
        &reported.reason,
        &reported.message,
        generation,
        now.clone(),
    );
}

/// `ProgressiveUpgradeSucceeded` from a controller trial's verdict, as the workload kinds report
/// theirs.
fn report_verdict(
    st: &mut NumaflowControllerRolloutStatus,
    plan: &numaplane_core::controller_trial::Plan,
    generation: i64,
    now: &Time,
) {
    let verdict = plan
        .status
        .upgrading_controller_status
        .as_ref()
        .and_then(|u| u.assessment_result.map(|r| (u, r)));
    if let Some((u, result)) = verdict.filter(|(_, r)| *r != AssessmentResult::Unknown) {
        let (status, reason, message) = if result == AssessmentResult::Success {
            (
                numaplane_core::health::HealthStatus::True,
                "Succeeded",
                format!("trial Numaflow controller {} succeeded", u.controller.name),
            )
        } else {
            (
                numaplane_core::health::HealthStatus::False,
                "Failed",
                format!(
                    "trial Numaflow controller {} failed: {}",
                    u.controller.name,
                    u.failure_reasons.join("; ")
                ),
            )
        };
        set_condition(
            &mut st.status.conditions,
            condition::PROGRESSIVE_UPGRADE_SUCCEEDED,
            status,
            reason,
            &message,
            generation,
            now.clone(),
        );
    }
}

fn check_owned(nc: &NumaflowController, uid: &str, ns: &str) -> Result<(), Error> {
    let owned = nc
        .owner_references()
        .iter()
        .any(|o| o.uid == uid && o.controller == Some(true));
    if owned {
        Ok(())
    } else {
        Err(Error::NotOwned {
            kind: "NumaflowController",
            name: nc.name_any(),
            namespace: ns.to_string(),
            owner_kind: SUBJECT.kind(),
        })
    }
}

/// The rollouts that still need the Numaflow controller, or `None` when there are none. Read
/// live: a stale cache must never let the controller go while they remain.
async fn remaining_rollouts(nctx: &NcCtx, ns: &str) -> Result<Option<String>, Error> {
    let client = &nctx.ctx.client;
    let lp = ListParams::default();
    let prs: Vec<String> = Api::<PipelineRollout>::namespaced(client.clone(), ns)
        .list_metadata(&lp)
        .await
        .ctx(|| "listing PipelineRollouts".into())?
        .items
        .iter()
        .map(|o| o.name_any())
        .collect();
    let isbrs: Vec<String> = Api::<ISBServiceRollout>::namespaced(client.clone(), ns)
        .list_metadata(&lp)
        .await
        .ctx(|| "listing ISBServiceRollouts".into())?
        .items
        .iter()
        .map(|o| o.name_any())
        .collect();
    let describe = |kind: &str, names: &[String]| {
        const SHOWN: usize = 5;
        let mut s = format!("{kind}s {}", names[..names.len().min(SHOWN)].join(", "));
        if names.len() > SHOWN {
            s.push_str(&format!(" and {} more", names.len() - SHOWN));
        }
        s
    };
    let parts: Vec<String> = [
        (Kind::Pipeline.rollout_kind(), &prs),
        (Kind::IsbService.rollout_kind(), &isbrs),
    ]
    .into_iter()
    .filter(|(_, names)| !names.is_empty())
    .map(|(kind, names)| describe(kind, names))
    .collect();
    Ok((!parts.is_empty()).then(|| parts.join(" and ")))
}

/// Deletion once nothing needs the Numaflow controller: delete the NumaflowController (its
/// objects follow by garbage collection) and remove the finalizer.
async fn delete_controller(r: &NumaflowControllerRollout, nctx: &NcCtx) -> Result<Action, Error> {
    let ctx = &nctx.ctx;
    let started = Instant::now();
    let (ns, name) = (r.ns(), r.name_any());
    publish(
        nctx,
        r,
        EventType::Normal,
        event_reason::DELETING,
        format!(
            "Deleting NumaflowController {name}: no PipelineRollouts or ISBServiceRollouts remain"
        ),
    )
    .await;
    let uid = r.uid().unwrap_or_default();
    // Its own NumaflowController and any trial's.
    let owned: Vec<_> = nctx
        .controllers
        .state()
        .into_iter()
        .filter(|nc| nc.metadata.namespace.as_deref() == Some(ns))
        .filter(|nc| nc.owner_references().iter().any(|o| o.uid == uid))
        .filter(|nc| nc.meta().deletion_timestamp.is_none())
        .collect();
    for nc in owned {
        super::child::delete(r, nctx, ns, &nc.name_any()).await?;
    }
    finalizer::remove(ctx, r).await?;
    ctx.forget(&uid);
    ctx.metrics.forget(SUBJECT, ns, &name);
    forget_running(nctx, ns, &name);
    ctx.metrics.child_change(
        SUBJECT.controller(),
        "delete",
        started.elapsed().as_secs_f64(),
    );
    info!("NumaflowController deleted, finalizer removed");
    Ok(Action::await_change())
}

/// `numaflow_controller_rollout_health` and `numaflow_controller_rollouts_running`.
fn record_metrics(
    nctx: &NcCtx,
    r: &NumaflowControllerRollout,
    st: &NumaflowControllerRolloutStatus,
) {
    let m = &nctx.ctx.metrics;
    let (ns, name) = (r.ns(), r.name_any());
    let labels: Labels = vec![
        ("namespace", ns.to_string()),
        ("numaflowcontroller", name.clone()),
        ("phase", st.status.phase.as_str().to_string()),
    ];
    m.set_health(SUBJECT, ns, &name, labels);
    let requesting = st.status.upgrade_in_progress == UpgradeStrategy::PipelinePauseAndDrain;
    m.pause_seconds(
        crate::metrics::PauseGauge::ControllerRollout,
        ns,
        &name,
        crate::pause_requests::request_seconds(
            st.pause_request_status.as_ref(),
            requesting,
            &status::now(),
        ),
    );
    let version = r.spec.controller.version.clone();
    let running = |v: String| -> Labels {
        vec![
            ("name", name.clone()),
            ("namespace", ns.to_string()),
            ("version", v),
        ]
    };
    let old = nctx
        .running
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert((ns.to_string(), name.clone()), version.clone());
    if let Some(old) = old.filter(|o| *o != version) {
        m.numaflow_controller_rollouts_running.remove(&running(old));
    }
    m.numaflow_controller_rollouts_running
        .get_or_create(&running(version))
        .set(1);
}

fn forget_running(nctx: &NcCtx, ns: &str, name: &str) {
    let old = nctx
        .running
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&(ns.to_string(), name.to_string()));
    if let Some(v) = old {
        nctx.ctx
            .metrics
            .numaflow_controller_rollouts_running
            .remove(&vec![
                ("name", name.to_string()),
                ("namespace", ns.to_string()),
                ("version", v),
            ]);
    }
}

async fn publish(
    nctx: &NcCtx,
    r: &NumaflowControllerRollout,
    t: EventType,
    reason: &str,
    note: String,
) {
    nctx.ctx
        .events
        .publish(
            Kind::NumaflowController.event_source(),
            &r.object_ref(&()),
            t,
            reason,
            note,
        )
        .await;
}
