//! The NumaflowController reconciler: definition → rendered objects → cluster, then health from
//! the Numaflow controller Deployment.

use super::nc_ctx::{Applied, NcCtx};
use super::owned::Cached;
use super::render::{self, ObjKey, Target};
use super::{apply, definitions};
use crate::error::Error;
use crate::reconcile::Ran;
use crate::status;
use crate::{finalizer, metrics::Labels};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use numaplane_api::Namespaced;
use numaplane_api::keys::{condition, event_reason, reason};
use numaplane_api::{NumaflowController, Subject};
use numaplane_core::conditions::get_condition;
use numaplane_core::controller_health::deployment_health;
use numaplane_core::health::{Health, HealthStatus};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::Instant;
use tracing::info;

/// This controller's subject: NumaflowControllers.
const SUBJECT: Subject = Subject::NumaflowController;

pub async fn reconcile(nc: Arc<NumaflowController>, nctx: Arc<NcCtx>) -> Result<Action, Error> {
    let ctx = nctx.ctx.clone();
    crate::reconcile::around(&ctx, nc, |nc, _| async move {
        Ran::Pass(if nc.meta().deletion_timestamp.is_some() {
            finalize(&nc, &nctx).await
        } else {
            run(&nc, &nctx).await
        })
    })
    .await
}

/// Deletion: the rendered objects go with the NumaflowController by garbage collection (they
/// carry its controller owner reference), so only the finalizer is removed.
async fn finalize(nc: &NumaflowController, nctx: &NcCtx) -> Result<Action, Error> {
    if !finalizer::has(nc) {
        return Ok(Action::await_change());
    }
    let ctx = &nctx.ctx;
    let started = Instant::now();
    ctx.events
        .publish(
            Subject::NumaflowController.event_source(),
            &nc.object_ref(&()),
            EventType::Normal,
            event_reason::DELETING,
            "Deleting NumaflowController".into(),
        )
        .await;
    finalizer::remove(ctx, nc).await?;
    if let Some(uid) = nc.uid() {
        nctx.forget(&uid);
    }
    let (ns, name) = (nc.ns(), nc.name_any());
    ctx.metrics.forget(SUBJECT, ns, &name);
    ctx.metrics.child_change(
        SUBJECT.controller(),
        "delete",
        started.elapsed().as_secs_f64(),
    );
    info!("finalizer removed; rendered objects follow by garbage collection");
    Ok(Action::await_change())
}

/// What a successful pass observed.
struct Outcome {
    /// `None` when the cached Deployment is older than our last write of it: keep the
    /// previous condition rather than judge a stale copy.
    health: Option<Health>,
    changed: bool,
}

async fn run(nc: &NumaflowController, nctx: &NcCtx) -> Result<Action, Error> {
    let ctx = &nctx.ctx;
    if !finalizer::has(nc) {
        finalizer::add(ctx, nc).await?;
    }
    let before = nc.status.clone().unwrap_or_default();
    let mut st = before.clone();
    let mut ledger = status::Ledger::new(before.status);
    let generation = nc.meta().generation.unwrap_or_default();
    let now = status::now();
    let started = Instant::now();
    // The reference's `create` duration: the pass that first brings up the controller.
    let first = nctx
        .owned
        .deployment(
            nc.ns(),
            &render::deployment_name(nc.spec.instance_id.as_deref()),
        )
        .is_none();
    let result = drive(nc, nctx).await;
    st.status.observed_generation = generation;
    let outcome = match result {
        Ok(o) => o,
        Err(e) => {
            status::mark_failed(&mut st.status, &e, &now);
            // Nothing could be applied for this version: say so where health is read. (API
            // errors leave the last observed health alone.)
            if matches!(
                e,
                Error::MissingDefinition { .. }
                    | Error::InvalidDefinition { .. }
                    | Error::InvalidSpec(_)
                    | Error::NotOwnedObject { .. }
            ) {
                let h = Health {
                    status: HealthStatus::False,
                    reason: reason::FAILED,
                    message: e.to_string(),
                };
                status::set_health(&mut st.status, &h, generation, &now);
            }
            publish(
                nctx,
                nc,
                EventType::Warning,
                event_reason::RECONCILE_FAILED,
                format!("reconcile failed: {e}"),
            )
            .await;
            record_health(nctx, nc, &st.status);
            ledger.write(nc, ctx, &st.status).await?;
            return Err(e);
        }
    };
    status::mark_deployed(&mut st.status, generation, &now);
    if let Some(h) = &outcome.health {
        status::set_health(&mut st.status, h, generation, &now);
    }
    if outcome.changed {
        let phase = if first { "create" } else { "update" };
        ctx.metrics
            .child_change(SUBJECT.controller(), phase, started.elapsed().as_secs_f64());
        publish(
            nctx,
            nc,
            EventType::Normal,
            event_reason::RECONCILE_SUCCESS,
            "Reconciliation successful".into(),
        )
        .await;
    }
    record_health(nctx, nc, &st.status);
    ledger.write(nc, ctx, &st.status).await?;
    Ok(Action::requeue(crate::context::RESYNC))
}

/// Observe (definition, caches), decide (full or incremental pass), act (apply, prune).
async fn drive(nc: &NumaflowController, nctx: &NcCtx) -> Result<Outcome, Error> {
    let ctx = &nctx.ctx;
    let (ns, name) = (nc.ns(), nc.name_any());
    let uid = nc
        .uid()
        .ok_or_else(|| Error::InvalidSpec("NumaflowController has no uid yet".into()))?;
    let version = &nc.spec.version;
    let instance_id = nc.spec.instance_id.as_deref();
    // The CRD refuses such an ID; one stored before it did must not reach names and labels.
    if let Some(problem) =
        numaplane_core::naming::instance_id_problem(instance_id, "spec.instanceID")
    {
        return Err(Error::InvalidSpec(problem));
    }
    let cfg = ctx.settings.controller();
    let search =
        definitions::search_order(ns, &ctx.operator_namespace, &cfg.definitions_namespaces);
    let manifest =
        nctx.definitions
            .lookup(version, &search)
            .map_err(|nf| Error::MissingDefinition {
                version: version.clone(),
                searched: nf.searched,
                ignored: nf.ignored,
            })?;
    let input = {
        let mut h = DefaultHasher::new();
        (&*manifest, version, instance_id, &uid, &name, &ns).hash(&mut h);
        cfg.included_resources.rules().hash(&mut h);
        h.finish()
    };
    let previous = nctx.applied(&uid);
    let full = previous
        .as_ref()
        .is_none_or(|p| p.input != input || p.at.elapsed() >= crate::context::RESYNC);
    let rendered = match &previous {
        Some(p) if !full => p.rendered.clone(),
        _ => {
            let owner = nc
                .controller_owner_ref(&())
                .ok_or_else(|| Error::InvalidSpec("NumaflowController has no uid yet".into()))?;
            let target = Target {
                name: &name,
                namespace: ns,
                instance_id,
                owner,
                allowed: &cfg.included_resources,
            };
            Arc::new(
                render::render(&manifest, &target).map_err(|e| Error::InvalidDefinition {
                    version: version.clone(),
                    problem: e.to_string(),
                })?,
            )
        }
    };
    let health_name = render::deployment_name(instance_id);
    let synced = apply::sync(nctx, nc, &rendered, previous.as_ref(), full, &health_name).await?;
    let changed = synced.changed();
    if changed {
        info!(
            applied = synced.applied,
            recreated = synced.recreated,
            pruned = synced.pruned,
            full,
            "Numaflow controller objects synced"
        );
        for _ in 0..synced.applied + synced.recreated * 2 + synced.pruned {
            ctx.metrics
                .numaflow_controller_kubectl_execution_total
                .inc();
        }
    }
    let health_key = ObjKey {
        group: "apps".into(),
        kind: "Deployment".into(),
        name: health_name.clone(),
    };
    let health = match synced.deployment {
        Some(d) => Some(deployment_health(Some(&d))),
        None => {
            let written = synced.seen.get(&health_key).map(|s| s.resource_version);
            match nctx.owned.cached(&health_key, ns) {
                Cached::Present(live) if written.is_some_and(|w| live.resource_version < w) => None,
                _ => Some(deployment_health(
                    nctx.owned.deployment(ns, &health_name).as_deref(),
                )),
            }
        }
    };
    nctx.set_applied(
        &uid,
        Applied {
            input,
            at: match (&previous, full) {
                (Some(p), false) => p.at,
                _ => Instant::now(),
            },
            rendered,
            seen: synced.seen,
        },
    );
    Ok(Outcome { health, changed })
}

fn record_health(nctx: &NcCtx, nc: &NumaflowController, st: &numaplane_api::common::Status) {
    let (ns, name) = (nc.ns(), nc.name_any());
    let healthy = get_condition(&st.conditions, condition::CHILD_RESOURCES_HEALTHY)
        .is_some_and(|c| c.status == HealthStatus::True.as_str());
    let labels: Labels = vec![
        ("namespace", ns.to_string()),
        ("numaflowcontroller", name.clone()),
        ("phase", st.phase.as_str().to_string()),
        ("childHealthy", healthy.to_string()),
    ];
    nctx.ctx.metrics.set_health(SUBJECT, ns, &name, labels);
}

async fn publish(nctx: &NcCtx, nc: &NumaflowController, t: EventType, reason: &str, note: String) {
    nctx.ctx
        .events
        .publish(
            Subject::NumaflowController.event_source(),
            &nc.object_ref(&()),
            t,
            reason,
            note,
        )
        .await;
}
