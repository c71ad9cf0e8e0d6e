//! The progressive strategy in the reconcile loop: observes the rollout, its promoted and trial
//! children, their pods and the AnalysisRun; asks [`numaplane_core::progressive::step`] for the
//! one next action; records the engine's state in status **before** acting (a promotion right
//! after: its label flip is its own record); acts. The engine is
//! pure and idempotent given the record, so a restart at any point continues the same upgrade.

use super::desired::{desired_child, desired_riders};
use super::kind::{Carry, Parts, Rollout, publish};
use super::lookup::cached_children;
use super::observation::{self, Trace};
use super::pass::Pass;
use super::placement::Resolved;
use crate::children::{self, ChildObject, DesiredChild};
use crate::context::Ctx;
use crate::error::{Error, KubeContext, is_not_found};
use crate::status::{self, RolloutStatus};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use numaplane_api::Kind;
use numaplane_api::Namespaced;
use numaplane_api::common::{RiderStatus, UpgradeStrategy};
use numaplane_api::keys::{condition, labels, upgrade_state, upgrade_state_reason};
use numaplane_api::narrow::AnalysisRunPhase;
use numaplane_api::numaflow::{AnalysisRun, Vertex};
use numaplane_api::progressive::AnalysisPhase;
use numaplane_api::strategy::Analysis;
use numaplane_core::config::{AssessmentSchedule, UserStrategy};
use numaplane_core::health::HealthStatus;
use numaplane_core::progressive::templates::{Template, TemplateRef};
use numaplane_core::progressive::{
    self, Action, ObservedRun, PromotedChild, PromotedPods, Record, StepInput, TrialChild,
    TrialHealth, scale,
};
use serde_json::{Value, json};
use std::time::Duration;
use tracing::{debug, info};

/// How the rollout's riders differ from those of the promoted child `child` (read from the
/// cluster, so only when the rollout changed): a change of a `progressive: true` rider starts a
/// progressive upgrade like a spec change (per-vertex riders and VPAs included).
pub(super) async fn rider_changes<R: Rollout>(
    pass: &Pass<'_, R>,
    ctx: &Ctx,
    child: &R::Child,
) -> Result<Vec<numaplane_core::usde::RiderChange>, Error> {
    let (obj, ns) = (pass.obj, pass.ns.as_str());
    if obj.progressive_parts().is_none()
        || ctx.settings.user_strategy(ns) != UserStrategy::Progressive
    {
        return Ok(Vec::new());
    }
    let desired = desired_riders(obj, ctx, child)?;
    let child_uid = child.uid().unwrap_or_default();
    let have = crate::riders::existing(ctx, ns, &child_uid, pass.st.riders()).await?;
    let diff = numaplane_core::riders::diff_riders(&desired, &have);
    Ok(numaplane_core::usde::rider_changes(&diff))
}

fn schedule(ctx: &Ctx, parts: &Parts<'_>) -> Result<AssessmentSchedule, Error> {
    let cfg = ctx.settings.controller();
    let configured = cfg.assessment_schedule(parts.kind);
    let own = parts
        .strategy
        .and_then(|s| s.assessment_schedule.as_deref())
        .filter(|s| !s.trim().is_empty());
    if let Some(s) = own {
        // An unreadable override falls back to the default, as the reference does.
        match AssessmentSchedule::parse(s, "spec.strategy.progressive.assessmentSchedule") {
            Ok(s) => return Ok(s),
            Err(e) => tracing::warn!(error = %e, "using the default assessment schedule"),
        }
    }
    configured.ok_or_else(|| {
        Error::InvalidSpec(format!(
            "no assessment schedule for kind {} in progressive.defaultAssessmentSchedule",
            parts.kind.child_kind()
        ))
    })
}

/// How soon a pass that found the cache behind the cluster looks again.
const CACHE_BEHIND_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// A child labelled trial (legacy `in-progress` too) and not being deleted.
fn is_live_trial<C: ChildObject>(c: &C) -> bool {
    matches!(
        c.labels().get(labels::UPGRADE_STATE).map(String::as_str),
        Some(upgrade_state::TRIAL) | Some(upgrade_state::IN_PROGRESS)
    ) && c.meta().deletion_timestamp.is_none()
}

/// The newest live trial child.
fn find_trial<R: Rollout>(ctx: &Ctx, ns: &str, rollout: &str) -> Option<R::Child> {
    cached_children::<R>(ctx, ns, rollout)
        .filter(|c| is_live_trial(&**c))
        .max_by_key(|c| c.meta().creation_timestamp.as_ref().map(|t| t.0))
        .map(|c| (*c).clone())
}

/// The recorded trial is labelled promoted with a promotion result: a promotion flipped it,
/// whether or not its record was written after (`Action::records_itself`).
fn flipped<R: Rollout>(ctx: &Ctx, ns: &str, rollout: &str, record: &Record) -> bool {
    use numaplane_api::keys::progressive_result_state::{FORCE_PROMOTED, SUCCEEDED};
    let Some(u) = &record.upgrading else {
        return false;
    };
    cached_children::<R>(ctx, ns, rollout).any(|c| {
        let label = |k: &str| c.labels().get(k).map(String::as_str);
        c.name_any() == u.name
            && c.meta().deletion_timestamp.is_none()
            && label(labels::UPGRADE_STATE) == Some(upgrade_state::PROMOTED)
            && matches!(
                label(labels::PROGRESSIVE_RESULT_STATE),
                Some(SUCCEEDED | FORCE_PROMOTED)
            )
    })
}

/// Other children still labelled promoted besides `newest` (a promotion cut short).
fn older_promoted<R: Rollout>(ctx: &Ctx, ns: &str, rollout: &str, newest: &str) -> Vec<String> {
    cached_children::<R>(ctx, ns, rollout)
        .filter(|c| {
            c.labels().get(labels::UPGRADE_STATE).map(String::as_str)
                == Some(upgrade_state::PROMOTED)
                && c.meta().deletion_timestamp.is_none()
                && c.name_any() != newest
        })
        .map(|c| c.name_any())
        .collect()
}

/// An ISB service trial is judged by the pipelines on it: the upgrading status of each
/// PipelineRollout on this ISBServiceRollout, read live.
async fn isbsvc_health_sample<K: ChildObject>(
    ctx: &Ctx,
    isb_rollout: &str,
    trial: &K,
    held: bool,
) -> Result<TrialHealth, Error> {
    let ns = trial.ns();
    let api: Api<numaplane_api::PipelineRollout> = Api::namespaced(ctx.client.clone(), ns);
    let prs = api
        .list(&ListParams::default())
        .await
        .ctx(|| "listing PipelineRollouts".to_string())?;
    let using: Vec<_> = prs
        .items
        .iter()
        .filter(|pr| numaplane_core::child::isb_rollout_name(&pr.spec.pipeline.spec) == isb_rollout)
        .map(|pr| {
            pr.status
                .as_ref()
                .and_then(|s| s.progressive_status.as_ref())
                .and_then(|p| p.upgrading_pipeline_status.as_ref())
        })
        .collect();
    Ok(progressive::health::isbsvc_health(
        &trial.name_any(),
        &using,
        trial.status(),
        held,
    ))
}

/// One health sample of a trial Pipeline or MonoVertex, and whether it was judged only from
/// the child itself, whose every change wakes the rollout (vertex counts do not: a Pipeline
/// whose own status passes it is sampled every interval while its vertices decide).
async fn health_sample<K: ChildObject>(
    ctx: &Ctx,
    kind: Kind,
    trial: &K,
) -> Result<(TrialHealth, bool), Error> {
    let json = trial.to_json();
    if kind == Kind::MonoVertex {
        let health = progressive::health::pipeline_type_health(&json, true, &[]);
        return Ok((health, true));
    }
    let ns = trial.ns();
    let (cached, complete) = cached_vertices(ctx, ns, &trial.name_any(), trial.spec());
    let vertices_decide = progressive::health::needs_every_vertex(&json);
    if complete || !vertices_decide {
        let health = progressive::health::pipeline_type_health(&json, false, &cached);
        return Ok((health, !vertices_decide));
    }
    let api: Api<Vertex> = Api::namespaced(ctx.client.clone(), ns);
    let lp = ListParams::default().labels(&format!(
        "{}={}",
        labels::NUMAFLOW_PIPELINE_NAME,
        trial.name_any()
    ));
    let vertices: Vec<Value> = api
        .list(&lp)
        .await
        .ctx(|| format!("listing vertices of {}", trial.name_any()))?
        .items
        .iter()
        .map(Vertex::to_json)
        .collect();
    let health = progressive::health::pipeline_type_health(&json, false, &vertices);
    Ok((health, false))
}

/// The Vertex objects of the trial pipeline `pipeline` that the Vertex cache holds (Numaflow
/// names them `<pipeline>-<vertex>`), and whether that is one for every vertex of its spec.
/// They are read live only when some are missing and the pipeline's own status would pass it:
/// a health sample every interval of every trial coming up was one label-selected LIST each,
/// which the API server answers by scanning every Vertex of the namespace.
fn cached_vertices(ctx: &Ctx, ns: &str, pipeline: &str, spec: &Value) -> (Vec<Value>, bool) {
    let Some(wanted) = spec.get("vertices").and_then(Value::as_array) else {
        return (Vec::new(), false);
    };
    let mut out = Vec::with_capacity(wanted.len());
    for v in wanted {
        let Some(vertex) = v.get("name").and_then(Value::as_str) else {
            continue;
        };
        let name = format!("{pipeline}-{vertex}");
        if let Some(counts) = ctx.stores.vertices.get(ns, &name)
            && counts.pipeline == pipeline
        {
            out.push(counts.to_json(&name));
        }
    }
    let complete = out.len() == wanted.len();
    (out, complete)
}

/// The AnalysisRun of the trial with UID `trial`: from the watch of Numaplane's runs (a
/// finished run wakes the rollout only once that cache shows it), read live when the cache
/// does not show this trial's run (just created, or no Argo Rollouts CRDs to watch).
async fn observed_run(
    ctx: &Ctx,
    ns: &str,
    name: &str,
    trial: Option<&str>,
) -> Result<Option<ObservedRun>, Error> {
    if let Some(run) = ctx
        .stores
        .analysis_runs
        .get(&ObjectRef::new(name).within(ns))
        && run
            .owner_references()
            .iter()
            .any(|o| Some(o.uid.as_str()) == trial)
    {
        return Ok(Some(observed(&run)));
    }
    let api: Api<AnalysisRunPhase> = Api::namespaced(ctx.client.clone(), ns);
    Ok(api
        .get_opt(name)
        .await
        .ctx(|| format!("reading AnalysisRun {name}"))?
        .as_ref()
        .map(observed))
}

fn observed(run: &AnalysisRunPhase) -> ObservedRun {
    let phase = run
        .phase
        .as_deref()
        .and_then(|p| serde_json::from_value::<AnalysisPhase>(Value::from(p)).ok())
        .unwrap_or_default();
    let completed_at = run
        .completed_at
        .as_deref()
        .and_then(|s| s.parse::<Timestamp>().ok());
    ObservedRun {
        phase,
        completed_at,
    }
}

/// Pods of the promoted child per vertex (or under the MonoVertex's name), and its HPA.
async fn promoted_pods<K: ChildObject>(
    ctx: &Ctx,
    kind: Kind,
    promoted: &K,
) -> Result<PromotedPods, Error> {
    let ns = promoted.ns();
    let name = promoted.name_any();
    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let mut out = PromotedPods::default();
    // Data pods only: a MonoVertex's daemon pods carry its name label too.
    let selector = match kind {
        Kind::MonoVertex => format!(
            "{}={name},{}={name}",
            labels::APP_NAME,
            labels::NUMAFLOW_MONO_VERTEX_NAME
        ),
        _ => format!(
            "{}={name},{}",
            labels::NUMAFLOW_PIPELINE_NAME,
            labels::NUMAFLOW_VERTEX_NAME
        ),
    };
    let pods = pods_api
        .list(&ListParams::default().labels(&selector))
        .await
        .ctx(|| format!("counting pods of {name}"))?;
    for p in pods
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        let key = match kind {
            Kind::MonoVertex => name.clone(),
            _ => p
                .labels()
                .get(labels::NUMAFLOW_VERTEX_NAME)
                .cloned()
                .unwrap_or_default(),
        };
        *out.pods.entry(key).or_default() += 1;
    }
    if kind == Kind::MonoVertex {
        out.hpa = owned_hpas(ctx, promoted)
            .await?
            .into_iter()
            .next()
            .and_then(|h| serde_json::to_value(h).ok());
    }
    Ok(out)
}

async fn owned_hpas<K: ChildObject>(
    ctx: &Ctx,
    child: &K,
) -> Result<Vec<HorizontalPodAutoscaler>, Error> {
    let ns = child.ns();
    let api: Api<HorizontalPodAutoscaler> = Api::namespaced(ctx.client.clone(), ns);
    let uid = child.uid();
    Ok(api
        .list(&ListParams::default())
        .await
        .ctx(|| "listing HorizontalPodAutoscalers".to_string())?
        .items
        .into_iter()
        .filter(|h| {
            h.owner_references()
                .iter()
                .any(|o| Some(&o.uid) == uid.as_ref())
        })
        .collect())
}

async fn merge_child<K: ChildObject>(
    ctx: &Ctx,
    ns: &str,
    name: &str,
    patch: &Value,
) -> Result<(), Error> {
    ctx.ensure_leader()?;
    children::patch::<K, _>(
        ctx,
        ns,
        name,
        &children::patch_params(),
        &Patch::Merge(patch),
    )
    .await
    .ctx(|| format!("patching {} {name}", K::kind(&())))?;
    Ok(())
}

async fn recreate_hpa(ctx: &Ctx, ns: &str, hpa: &Value) -> Result<(), Error> {
    ctx.ensure_leader()?;
    let hpa: HorizontalPodAutoscaler = serde_json::from_value(hpa.clone())
        .map_err(|e| Error::InvalidSpec(format!("saved HorizontalPodAutoscaler: {e}")))?;
    let api: Api<HorizontalPodAutoscaler> = Api::namespaced(ctx.client.clone(), ns);
    match api.create(&PostParams::default(), &hpa).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e).ctx(|| "re-creating HorizontalPodAutoscaler".to_string()),
    }
}

fn set_progress_condition<S: RolloutStatus>(
    st: &mut S,
    ok: bool,
    reason: &str,
    message: &str,
    generation: i64,
    now: &Time,
) {
    numaplane_core::conditions::set_condition(
        &mut st.common_mut().conditions,
        condition::PROGRESSIVE_UPGRADE_SUCCEEDED,
        if ok {
            HealthStatus::True
        } else {
            HealthStatus::False
        },
        reason,
        message,
        generation,
        now.clone(),
    );
}

/// The AnalysisRun for `trial`: the referenced templates' metrics and declared args, the
/// user's args and the reference's name args, owned by the trial.
async fn analysis_run<K: ChildObject>(
    ctx: &Ctx,
    kind: Kind,
    analysis: &Analysis,
    name: &str,
    trial: &K,
    promoted: &str,
) -> Result<Value, Error> {
    let ns = trial.ns();
    let refs: Vec<TemplateRef> = analysis
        .templates
        .iter()
        .flatten()
        .map(|t| TemplateRef {
            name: t.template_name.clone(),
            cluster_scope: t.cluster_scope.unwrap_or(false),
        })
        .collect();
    let templates = resolve_templates(ctx, ns, refs).await?;
    let lower = kind.child_kind().to_ascii_lowercase();
    let mut args: Vec<Value> = analysis
        .args
        .iter()
        .flatten()
        .map(|a| serde_json::to_value(a).unwrap_or(Value::Null))
        .collect();
    args.extend([
        json!({"name": format!("upgrading-{lower}-name"), "value": trial.name_any()}),
        json!({"name": format!("promoted-{lower}-name"), "value": promoted}),
        json!({"name": format!("{lower}-namespace"), "value": ns}),
    ]);
    let spec = numaplane_core::progressive::templates::run_spec(&templates, &args)
        .map_err(|e| Error::InvalidSpec(format!("spec.strategy.analysis: {e}")))?;
    let owner = trial.controller_owner_ref(&()).map(|mut o| {
        o.block_owner_deletion = Some(true);
        o
    });
    Ok(json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "AnalysisRun",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {labels::PART_OF: labels::PART_OF_NUMAPLANE},
            "ownerReferences": owner.into_iter().collect::<Vec<_>>(),
        },
        "spec": spec,
    }))
}

/// The referenced templates, each followed by those its `spec.templates` names (depth first,
/// as Argo Rollouts resolves them); a reference met again is not fetched again, so a cycle
/// ends instead of recursing forever.
async fn resolve_templates(
    ctx: &Ctx,
    ns: &str,
    refs: Vec<TemplateRef>,
) -> Result<Vec<Template>, Error> {
    let mut out = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    let mut stack: Vec<TemplateRef> = refs.into_iter().rev().collect();
    while let Some(r) = stack.pop() {
        if !seen.insert(r.clone()) {
            continue;
        }
        let t = fetch_template(ctx, ns, &r.name, r.cluster_scope).await?;
        let spec = t.get("spec").cloned().unwrap_or(Value::Null);
        stack.extend(
            numaplane_core::progressive::templates::nested_refs(&spec)
                .into_iter()
                .rev(),
        );
        out.push(Template {
            name: r.name,
            cluster_scope: r.cluster_scope,
            spec,
        });
    }
    Ok(out)
}

async fn fetch_template(ctx: &Ctx, ns: &str, name: &str, cluster: bool) -> Result<Value, Error> {
    use kube::api::DynamicObject;
    use kube::core::{ApiResource, GroupVersionKind};
    let kind = if cluster {
        "ClusterAnalysisTemplate"
    } else {
        "AnalysisTemplate"
    };
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("argoproj.io", "v1alpha1", kind));
    let api: Api<DynamicObject> = if cluster {
        Api::all_with(ctx.client.clone(), &ar)
    } else {
        Api::namespaced_with(ctx.client.clone(), ns, &ar)
    };
    match api.get_opt(name).await {
        Ok(Some(t)) => Ok(serde_json::to_value(t).unwrap_or(Value::Null)),
        Ok(None) => Err(Error::InvalidSpec(format!(
            "spec.strategy.analysis.templates: {kind} {name} not found"
        ))),
        Err(e) if is_not_found(&e) => Err(Error::InvalidSpec(format!(
            "spec.strategy.analysis.templates: {kind} {name} not found"
        ))),
        Err(e) => Err(e).ctx(|| format!("reading {kind} {name}")),
    }
}

/// The trial's riders as the rollout wants them: the promoted child's, templated for the
/// trial, but never HorizontalPodAutoscalers (the trial's scale is fixed while it is judged).
fn wanted_trial_riders<R: Rollout>(
    obj: &R,
    ctx: &Ctx,
    trial: &R::Child,
) -> Result<Vec<numaplane_core::riders::DesiredRider>, Error> {
    Ok(desired_riders(obj, ctx, trial)?
        .into_iter()
        .filter(|r| r.gvk.kind != "HorizontalPodAutoscaler")
        .collect())
}

/// Creates the trial's riders; returns them for `upgrading…Status.riders`.
async fn trial_riders<R: Rollout>(
    p: &Progress<'_, R>,
    trial: &R::Child,
    recorded: &[RiderStatus],
) -> Result<Vec<RiderStatus>, Error> {
    let riders = wanted_trial_riders(p.obj, p.ctx, trial)?;
    crate::riders::sync(p.ctx, &p.ns, trial, recorded, &riders).await?;
    Ok(numaplane_core::riders::rider_status(&riders))
}

/// Whether the rollout's riders for the trial differ from those it was created with (read from
/// the cluster, so only on a pass where the rollout changed): a rider edit during a trial
/// replaces the trial like a spec edit, instead of landing unassessed on the next promoted child.
async fn trial_riders_differ<R: Rollout>(
    p: &Progress<'_, R>,
    trial: &R::Child,
    recorded: &[RiderStatus],
) -> Result<bool, Error> {
    let want = wanted_trial_riders(p.obj, p.ctx, trial)?;
    let trial_uid = trial.uid().unwrap_or_default();
    let have = crate::riders::existing(p.ctx, &p.ns, &trial_uid, recorded).await?;
    Ok(!numaplane_core::riders::diff_riders(&want, &have).is_empty())
}

/// The labels of a trial promoted: its state and reason, and the result of its assessment.
fn promoted_labels(result: &str) -> std::collections::BTreeMap<String, String> {
    let mut l = std::collections::BTreeMap::from(numaplane_core::child::state_labels(
        upgrade_state::PROMOTED,
        upgrade_state_reason::PROGRESSIVE_SUCCESS,
    ));
    l.insert(labels::PROGRESSIVE_RESULT_STATE.into(), result.into());
    l
}

/// What the rollout's status says it waits for while a step of its upgrade is under way.
fn waiting_for(step: &str) -> String {
    format!("progressive: {step}")
}

/// Logs a pass's step: at debug when it only waits and records nothing new (a trial whose
/// vertices decide is sampled every `interval`; at N=10,000 a line per sample was most of a
/// 195 MB log).
fn log_step(plan: &progressive::Plan, recorded_anew: bool) {
    if recorded_anew || !matches!(plan.action, Action::Wait { .. }) {
        info!(action = plan.action.name(), step = %plan.message, "progressive step");
    } else {
        debug!(action = plan.action.name(), step = %plan.message, "progressive step");
    }
}

/// What the rollout asks of its promoted child `live` in a progressive pass.
pub(super) struct Asked<'a, R: Rollout> {
    pub resolved: &'a Resolved<R::Resolved>,
    pub live: &'a R::Child,
    pub desired: DesiredChild,
    /// A `progressive: true` rider was modified.
    pub riders_changed: bool,
}

/// One progressive pass for a rollout whose promoted child is `asked.live`.
pub(super) async fn pass<R: Rollout>(
    pass: &mut Pass<'_, R>,
    ctx: &Ctx,
    asked: Asked<'_, R>,
    trace: &Trace,
    wake: &mut Option<Timestamp>,
) -> Result<Carry<R::Child>, Error> {
    let (live, desired) = (asked.live, asked.desired);
    let obj = pass.obj;
    let Some(parts) = obj.progressive_parts() else {
        return Ok(Carry::Apply(Box::new(desired)));
    };
    let (generation, now) = (pass.generation, pass.now.clone());
    let p = Progress {
        obj,
        ctx,
        resolved: asked.resolved,
        live,
        parts,
        ns: pass.ns.clone(),
        name: pass.name.clone(),
        uid: pass.uid.clone(),
        generation,
        now: &now,
    };
    let st = &mut pass.st;
    let strategy_before = st.common().upgrade_in_progress;
    st.common_mut().upgrade_in_progress = UpgradeStrategy::Progressive;
    let record = R::read_record(st);
    let rollout_changed = st.common().observed_generation != generation;
    let trial = p.observe_trial(&record, rollout_changed).await?;
    let plan = p
        .plan(&record, &desired, asked.riders_changed, trial.as_ref())
        .await?;
    if let Some(behind) = p.cache_behind(&plan, &record).await? {
        // Fail closed: a trial is only ever started from a view that shows every child.
        info!(missing = ?behind, "the cache lacks children the cluster has: no trial is started until it shows them");
        let retry = status::now().0 + CACHE_BEHIND_RETRY;
        *wake = Some(wake.map_or(retry, |w| w.min(retry)));
        return Ok(Carry::Prepared {
            child: live.clone(),
            pending: Some(waiting_for(&format!(
                "the watch to show children {} before a trial is started",
                behind.join(", ")
            ))),
        });
    }
    schedule_verdict(&p, &plan);
    // Record first, then act; a promotion's label flip is its own record (the engine reads it
    // back), so it goes first and the status written at the end of the pass records it. The
    // record's write also shows what the pass will report (its step, the child's health): the
    // report then finds nothing new to write unless acting changed it.
    R::write_record(&plan.record, st);
    let recorded_anew =
        R::read_record(&obj.status_of().cloned().unwrap_or_default()) != plan.record;
    if !plan.action.records_itself() && recorded_anew {
        let shown = observation::preview::<R>(
            ctx,
            st,
            live,
            &waiting_for(&plan.message),
            strategy_before,
            trace,
            (generation, &now),
        );
        pass.record_before_acting(ctx, &shown).await?;
    }
    let st = &mut pass.st;
    log_step(&plan, recorded_anew);
    let acted = p
        .act(st, plan, &record, desired, trial.as_ref().map(|t| &t.child))
        .await?;
    if let Some(u) = acted.wake {
        *wake = Some(wake.map_or(u, |w| w.min(u)));
    }
    if let Some(after) = &acted.after {
        R::write_record(after, st);
    }
    Ok(acted.carry)
}

/// A verdict that falls due gets its pass at its moment, beside the workers (`due_steps.rs`);
/// any other step clears what an earlier pass scheduled.
fn schedule_verdict<R: Rollout>(p: &Progress<'_, R>, plan: &progressive::Plan) {
    let deadline = match plan.action {
        Action::Wait { until: Some(u) } if plan.deadline => {
            let left = u.duration_since(status::now().0);
            let left = Duration::try_from(left).unwrap_or(Duration::ZERO);
            Some(std::time::Instant::now() + left + crate::due_steps::WAKE_MARGIN)
        }
        _ => None,
    };
    p.ctx.due_steps.schedule(
        crate::due_steps::StepOf {
            controller: R::KIND.controller(),
            namespace: p.ns.clone(),
            name: p.name.clone(),
            uid: p.uid.clone(),
        },
        deadline,
    );
}

/// What a progressive pass works on: the rollout, its promoted child, where and when.
struct Progress<'a, R: Rollout> {
    obj: &'a R,
    ctx: &'a Ctx,
    resolved: &'a Resolved<R::Resolved>,
    live: &'a R::Child,
    parts: Parts<'a>,
    ns: String,
    name: String,
    uid: String,
    generation: i64,
    now: &'a Time,
}

/// The trial child as the engine judges it.
struct ObservedTrial<C> {
    child: C,
    /// Its spec (or riders) no longer what the rollout asks for.
    differs: bool,
    health: TrialHealth,
    /// `health` was judged only from what wakes the rollout when it changes.
    health_watched: bool,
    run: Option<ObservedRun>,
}

/// The observed trial as the engine reads it: its labels, health and AnalysisRun.
fn trial_child<C: ChildObject>(t: &ObservedTrial<C>) -> TrialChild<'_> {
    let label = |key: &str| t.child.labels().get(key).map(String::as_str);
    TrialChild {
        name: t.child.meta().name.as_deref().unwrap_or_default(),
        spec: t.child.spec(),
        force_promote_label: label(labels::FORCE_PROMOTE).is_some(),
        abort_label: label(labels::ABORT).is_some(),
        retry_label: label(labels::RETRY).is_some(),
        result_label: label(labels::PROGRESSIVE_RESULT_STATE),
        differs_from_rollout: t.differs,
        health: t.health.clone(),
        health_watched: t.health_watched,
        analysis_run: t.run.clone(),
    }
}

/// What acting on a plan left: the pass's answer, the record to keep after it, and when to
/// look again.
struct Acted<C> {
    carry: Carry<C>,
    after: Option<numaplane_core::progressive::Record>,
    wake: Option<Timestamp>,
}

impl<R: Rollout> Progress<'_, R> {
    /// Observe: the live trial, whether it still matches the rollout, its health and its
    /// AnalysisRun.
    async fn observe_trial(
        &self,
        record: &numaplane_core::progressive::Record,
        rollout_changed: bool,
    ) -> Result<Option<ObservedTrial<R::Child>>, Error> {
        let (obj, ctx, kind) = (self.obj, self.ctx, self.parts.kind);
        let (metadata, template) = obj.child_template();
        let cached = find_trial::<R>(ctx, &self.ns, &self.name);
        let Some(t) = (match cached {
            Some(t) => Some(t),
            None => self.created_trial(record).await?,
        }) else {
            return Ok(None);
        };
        let want = desired_child(
            obj,
            self.resolved,
            &t.name_any(),
            upgrade_state::TRIAL,
            (metadata, template),
            None,
        )?;
        let instance = numaplane_core::child::numaflow_instance;
        let mut differs = scale::trial_differs(kind, t.spec(), &want.spec, &record.trial_scale)
            || instance(&want.annotations) != instance(t.annotations());
        if !differs
            && rollout_changed
            && let Some(u) = record.upgrading_for(&t.name_any())
            && u.initialization_complete
        {
            differs = trial_riders_differ(self, &t, &u.riders).await?;
        }
        let run_name = progressive::analysis_run_name(kind, &t.name_any());
        let run = if record.analysis.is_some() {
            observed_run(ctx, &self.ns, &run_name, t.meta().uid.as_deref()).await?
        } else {
            None
        };
        let (health, health_watched) = if kind == Kind::IsbService {
            let sample = isbsvc_health_sample(ctx, &self.name, &t, self.resolved.placement.hold);
            (sample.await?, false)
        } else {
            health_sample(ctx, kind, &t).await?
        };
        Ok(Some(ObservedTrial {
            child: t,
            differs,
            health,
            health_watched,
            run,
        }))
    }

    /// The trial the record names, when the cache does not show it: a recent pass created it
    /// and the watch has not brought it yet (the status that pass wrote wakes this one at once),
    /// or the watch is relisting and its last list predates it. Read live, so that it is
    /// neither applied again nor taken for gone (which would start another trial beside it).
    async fn created_trial(
        &self,
        record: &numaplane_core::progressive::Record,
    ) -> Result<Option<R::Child>, Error> {
        let Some(u) = record.upgrading.as_ref() else {
            return Ok(None);
        };
        if u.discontinued
            || R::children(&self.ctx.stores)
                .named(&self.ns, &u.name)
                .is_some()
        {
            return Ok(None);
        }
        let api: Api<R::Child> = Api::namespaced(self.ctx.client.clone(), &self.ns);
        let live = api
            .get_opt(&u.name)
            .await
            .ctx(|| format!("reading trial {}", u.name))?;
        Ok(live.filter(|c| {
            is_live_trial(c) && c.labels().get(labels::PARENT_ROLLOUT_NAME) == Some(&self.name)
        }))
    }

    /// Before a new trial is created: the rollout's children the API server lists that the
    /// cache does not show, if any. A trial the cache lost sight of (a relist in progress whose
    /// last list predates it) must not be taken for absent; one LIST per trial started.
    async fn cache_behind(
        &self,
        plan: &numaplane_core::progressive::Plan,
        record: &numaplane_core::progressive::Record,
    ) -> Result<Option<Vec<String>>, Error> {
        let Action::CreateTrial { name, .. } = &plan.action else {
            return Ok(None);
        };
        if record.upgrading.as_ref().is_some_and(|u| &u.name == name) {
            // Resuming the creation the record names: `created_trial` read it live.
            return Ok(None);
        }
        let cached: std::collections::HashSet<String> =
            cached_children::<R>(self.ctx, &self.ns, &self.name)
                .map(|c| c.name_any())
                .collect();
        let missing: Vec<String> = children::list_live::<R::Child>(self.ctx, &self.ns, &self.name)
            .await?
            .iter()
            .filter(|c| c.meta().deletion_timestamp.is_none())
            .map(|c| c.name_any())
            .filter(|n| !cached.contains(n))
            .collect();
        Ok((!missing.is_empty()).then_some(missing))
    }

    /// Plan: one step of the pure engine, observing the promoted child's pods when it asks.
    async fn plan(
        &self,
        record: &numaplane_core::progressive::Record,
        desired: &DesiredChild,
        riders_changed: bool,
        trial: Option<&ObservedTrial<R::Child>>,
    ) -> Result<numaplane_core::progressive::Plan, Error> {
        let (ctx, live, parts, kind) = (self.ctx, self.live, &self.parts, self.parts.kind);
        let cfg = ctx.settings.controller();
        // A move to another Numaflow controller instance needs a new child as much as a spec
        // change does (Numaflow refuses to change an object's instance).
        let instance = numaplane_core::child::numaflow_instance;
        let differs_from_promoted = riders_changed
            || scale::promoted_differs(kind, live.spec(), &desired.spec)
            || instance(&desired.annotations) != instance(live.annotations());
        let trial_input = trial.map(trial_child);
        let live_name = live.name_any();
        let older = older_promoted::<R>(ctx, &self.ns, &self.name, &live_name);
        let taken: Vec<String> = cached_children::<R>(ctx, &self.ns, &self.name)
            .map(|c| c.name_any())
            .collect();
        let flipped = flipped::<R>(ctx, &self.ns, &self.name, record);
        let sched = schedule(ctx, parts)?;
        let analysis_enabled = parts
            .analysis
            .and_then(|a| a.templates.as_ref())
            .is_some_and(|t| !t.is_empty())
            && !(kind == Kind::Pipeline && cfg.disable_analysis_runs_for_pipeline);
        let force_promote = parts
            .strategy
            .and_then(|s| s.force_promote)
            .unwrap_or(false);
        let mut pods: Option<PromotedPods> = None;
        loop {
            let input = StepInput {
                kind,
                now: self.now.0,
                rollout_name: &self.name,
                schedule: sched,
                analysis_run_timeout: cfg.analysis_run_timeout,
                analysis_enabled,
                force_promote,
                has_hpa_rider: parts.has_hpa_rider,
                desired_spec: &desired.spec,
                differs_from_promoted,
                promoted: Some(PromotedChild {
                    name: &live_name,
                    spec: live.spec(),
                    pods: pods.as_ref(),
                }),
                older_promoted: &older,
                taken: &taken,
                flipped,
                trial: trial_input.clone(),
                record,
                hold: self.resolved.placement.hold,
            };
            let plan = progressive::step(&input)
                .map_err(|e| Error::InvalidSpec(format!("progressive upgrade: {e}")))?;
            if plan.action == Action::ObservePromotedPods && pods.is_none() {
                pods = Some(promoted_pods(ctx, kind, live).await?);
                continue;
            }
            return Ok(plan);
        }
    }

    /// Act: carry out the planned step (already recorded in status). (Long: one arm per engine
    /// [`Action`], each a few API calls, read best side by side.)
    async fn act(
        &self,
        st: &mut R::Status,
        plan: numaplane_core::progressive::Plan,
        record: &numaplane_core::progressive::Record,
        desired: DesiredChild,
        trial_obj: Option<&R::Child>,
    ) -> Result<Acted<R::Child>, Error> {
        let (obj, ctx, live, parts, kind) =
            (self.obj, self.ctx, self.live, &self.parts, self.parts.kind);
        let (ns, name) = (self.ns.clone(), self.name.clone());
        let (generation, now) = (self.generation, self.now);
        let (metadata, template) = obj.child_template();
        let live_name = live.name_any();
        let message = plan.message;
        let mut wake = None;
        let pending = |m: &str| Carry::Prepared {
            child: live.clone(),
            pending: Some(waiting_for(m)),
        };
        let mut after = plan.after;
        let carry = match plan.action {
            Action::ObservePromotedPods | Action::Persist => pending(&message),
            Action::CreateTrial {
                name: trial_name,
                promoted_scale_values,
            } => {
                let mut want = desired_child(
                    obj,
                    self.resolved,
                    &trial_name,
                    upgrade_state::TRIAL,
                    (metadata, template),
                    None,
                )?;
                want.spec = scale::trial_spec(kind, &want.spec, &promoted_scale_values);
                children::create::<R::Child>(ctx, &want).await?;
                info!(trial = %trial_name, "created trial child");
                ctx.metrics
                    .progressive_started(kind, &ns, &name, &trial_name);
                pending(&message)
            }
            Action::InitializeTrial {
                trial: _,
                promoted,
                promoted_patch,
                delete_promoted_hpa,
            } => {
                if let Some(t) = trial_obj {
                    let recorded = record
                        .upgrading_for(&t.name_any())
                        .map(|u| u.riders.clone())
                        .unwrap_or_default();
                    let riders = trial_riders(self, t, &recorded).await?;
                    if let Some(u) = after.as_mut().and_then(|a| a.upgrading.as_mut()) {
                        u.riders = riders;
                    }
                    // (the ISB service's PDB)
                    obj.ensure_companions(ctx, t).await?;
                }
                if delete_promoted_hpa {
                    for h in owned_hpas(ctx, live).await? {
                        ctx.ensure_leader()?;
                        let api: Api<HorizontalPodAutoscaler> =
                            Api::namespaced(ctx.client.clone(), &ns);
                        // Only the HPA that was listed as the child's, not a later namesake.
                        let dp = DeleteParams {
                            preconditions: Some(kube::api::Preconditions {
                                uid: h.uid(),
                                resource_version: None,
                            }),
                            ..Default::default()
                        };
                        match api.delete(&h.name_any(), &dp).await {
                            Ok(_) => {}
                            Err(e) if is_not_found(&e) || crate::error::is_conflict(&e) => {}
                            Err(e) => {
                                return Err(e).ctx(|| "deleting the promoted HPA".to_string());
                            }
                        }
                    }
                }
                if let Some(p) = &promoted_patch {
                    merge_child::<R::Child>(ctx, &ns, &promoted, p).await?;
                }
                pending(&message)
            }
            Action::CreateAnalysisRun {
                name: run_name,
                trial: trial_name,
            } => {
                if let (Some(t), Some(a)) = (trial_obj, parts.analysis) {
                    let body = analysis_run(ctx, kind, a, &run_name, t, &live_name).await?;
                    let run: AnalysisRun = serde_json::from_value(body)
                        .map_err(|e| Error::InvalidSpec(format!("AnalysisRun: {e}")))?;
                    ctx.ensure_leader()?;
                    let api: Api<AnalysisRun> = Api::namespaced(ctx.client.clone(), &ns);
                    match api.create(&PostParams::default(), &run).await {
                        Ok(_) => info!(run = %run_name, trial = %trial_name, "created AnalysisRun"),
                        Err(kube::Error::Api(e)) if e.code == 409 => {}
                        Err(e) => return Err(e).ctx(|| format!("creating AnalysisRun {run_name}")),
                    }
                }
                pending(&message)
            }
            Action::Wait { until } => {
                wake = until;
                pending(&message)
            }
            Action::Promote {
                trial: trial_name,
                previous,
                result_label,
            } => {
                merge_child::<R::Child>(
                    ctx,
                    &ns,
                    &trial_name,
                    &json!({"metadata": {"labels": promoted_labels(result_label)}}),
                )
                .await?;
                for p in &previous {
                    if let Some(c) = R::children(&ctx.stores).named(&ns, p) {
                        children::mark_recyclable(
                            ctx,
                            &*c,
                            upgrade_state_reason::PROGRESSIVE_SUCCESS,
                        )
                        .await?;
                    }
                }
                info!(trial = %trial_name, ?previous, "trial promoted");
                set_progress_condition(
                    st,
                    true,
                    "Succeeded",
                    &format!("New Child Object {ns}/{trial_name} Running"),
                    generation,
                    now,
                );
                ctx.metrics.progressive_completed(
                    kind,
                    &ns,
                    &name,
                    &trial_name,
                    true,
                    result_label != numaplane_api::keys::progressive_result_state::SUCCEEDED,
                );
                pending(&message)
            }
            Action::Fail {
                trial: trial_name,
                promoted,
                label_failed,
                promoted_patch,
                recreate_hpa: hpa,
                trial_patch,
            } => {
                if label_failed {
                    merge_child::<R::Child>(
                        ctx,
                        &ns,
                        &trial_name,
                        &json!({"metadata": {"labels": {
                            labels::PROGRESSIVE_RESULT_STATE:
                                numaplane_api::keys::progressive_result_state::FAILED,
                        }}}),
                    )
                    .await?;
                    // Once per failed trial (the label flips once): why, where users look.
                    publish(
                        &ctx.events,
                        obj,
                        kube::runtime::events::EventType::Warning,
                        numaplane_api::keys::event_reason::PROGRESSIVE_UPGRADE_FAILED,
                        message.clone(),
                    )
                    .await;
                }
                if let Some(p) = &promoted_patch {
                    merge_child::<R::Child>(ctx, &ns, &promoted, p).await?;
                }
                if let Some(h) = &hpa {
                    recreate_hpa(ctx, &ns, h).await?;
                }
                if let Some(p) = &trial_patch {
                    merge_child::<R::Child>(ctx, &ns, &trial_name, p).await?;
                }
                set_progress_condition(
                    st,
                    false,
                    "Failed",
                    &format!("New Child Object {ns}/{trial_name} Failed"),
                    generation,
                    now,
                );
                ctx.metrics
                    .progressive_completed(kind, &ns, &name, &trial_name, false, false);
                pending(&message)
            }
            Action::ReplaceTrial {
                trial: trial_name,
                reason,
            } => {
                // (the engine names the trial it judged; the live one is the same or newer)
                if let Some(t) = trial_obj {
                    children::mark_recyclable(ctx, t, reason).await?;
                }
                info!(trial = %trial_name, reason, "trial replaced");
                pending(&message)
            }
            Action::Discontinue {
                trial: trial_name,
                promoted_patch,
                recreate_hpa: hpa,
            } => {
                if let Some(t) = trial_obj {
                    children::mark_recyclable(
                        ctx,
                        t,
                        upgrade_state_reason::DISCONTINUE_PROGRESSIVE,
                    )
                    .await?;
                }
                if let Some(p) = &promoted_patch {
                    merge_child::<R::Child>(ctx, &ns, &live_name, p).await?;
                }
                if let Some(h) = &hpa {
                    recreate_hpa(ctx, &ns, h).await?;
                }
                info!(trial = %trial_name, "progressive upgrade discontinued");
                set_progress_condition(st, true, "Discontinued", "Discontinued", generation, now);
                pending(&message)
            }
            Action::RestorePromoted {
                promoted,
                promoted_patch,
                recreate_hpa: hpa,
            } => {
                if let Some(p) = &promoted_patch {
                    merge_child::<R::Child>(ctx, &ns, &promoted, p).await?;
                }
                if let Some(h) = &hpa {
                    recreate_hpa(ctx, &ns, h).await?;
                }
                pending(&message)
            }
            Action::RecreatePromoted => pending(&message),
            Action::Done => {
                st.common_mut().upgrade_in_progress = UpgradeStrategy::NoOp;
                Carry::Apply(Box::new(desired))
            }
        };
        Ok(Acted { carry, after, wake })
    }
}
