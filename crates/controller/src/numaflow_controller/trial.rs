//! A progressive upgrade of the Numaflow controller, the NumaflowControllerRollout's side
//! (docs/progressive-numaflow-controller.md): observe the rollout's NumaflowControllers, the
//! namespace's workload rollouts and the instances Numaflow objects carry; ask the pure
//! [`numaplane_core::controller_trial::plan`]; record its status, then create or delete
//! controllers. The workloads read the recorded status (`rollout/placement.rs`).

use super::nc_ctx::NcCtx;
use crate::error::{Error, KubeContext};
use crate::rollout::placement::instance_of;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::ApiResource;
use kube::{Resource, ResourceExt};
use numaplane_api::Kind;
use numaplane_api::Namespaced;
use numaplane_api::keys::{labels, upgrade_state};
use numaplane_api::numaflow_controller_rollout::{ControllerInstance, ControllerProgressiveStatus};
use numaplane_api::progressive::AssessmentResult;
use numaplane_api::{
    ISBServiceRollout, MonoVertexRollout, NumaflowController, NumaflowControllerRollout,
    NumaflowControllerSpec, PipelineRollout,
};
use numaplane_core::config::AssessmentSchedule;
use numaplane_core::controller_health::mirror_controller;
use numaplane_core::controller_trial::{
    Action, ControllerChild, DEFAULT_MAX_PARALLEL, DEFAULT_SCHEDULE, Input, Plan, Workload, plan,
};
use numaplane_core::health::HealthStatus;
use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::Arc;
use tracing::info;

/// A workload rollout as listed, with what the plan reads from it.
struct Listed {
    kind: Kind,
    rollout: String,
    isb_rollout: Option<String>,
    trial: Option<(String, AssessmentResult)>,
    promoted_instance: Option<String>,
}

/// The rollout's NumaflowControllers (any name; owned by its UID).
fn controllers(nctx: &NcCtx, r: &NumaflowControllerRollout) -> Vec<Arc<NumaflowController>> {
    let (ns, uid) = (r.ns().to_string(), r.uid().unwrap_or_default());
    nctx.controllers
        .state()
        .into_iter()
        .filter(|nc| nc.metadata.namespace.as_deref() == Some(ns.as_str()))
        .filter(|nc| nc.owner_references().iter().any(|o| o.uid == uid))
        .collect()
}

/// The instances some ISB service, Pipeline or MonoVertex of `ns` carries.
fn instances_in_use(nctx: &NcCtx, ns: &str) -> BTreeSet<String> {
    let stores = &nctx.ctx.stores;
    let in_ns = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        m.namespace.as_deref() == Some(ns)
    };
    fn of<K: Resource>(objects: Vec<Arc<K>>) -> impl Iterator<Item = String> {
        objects.into_iter().map(|o| instance_of(&*o).to_string())
    }
    of(stores.pipelines.filtered(in_ns))
        .chain(of(stores.monovertices.filtered(in_ns)))
        .chain(of(stores.isbsvcs.filtered(in_ns)))
        .collect()
}

/// Lists the namespace's workload rollouts live, leniently (a rollout that does not parse as
/// its type still counts), with their trial and promoted children from the caches.
async fn workloads(
    nctx: &NcCtx,
    ns: &str,
    trial_instance: Option<&str>,
) -> Result<Vec<Listed>, Error> {
    let ctx = &nctx.ctx;
    let kinds = [
        (
            Kind::IsbService,
            ApiResource::erase::<ISBServiceRollout>(&()),
            "upgradingISBServiceStatus",
        ),
        (
            Kind::Pipeline,
            ApiResource::erase::<PipelineRollout>(&()),
            "upgradingPipelineStatus",
        ),
        (
            Kind::MonoVertex,
            ApiResource::erase::<MonoVertexRollout>(&()),
            "upgradingMonoVertexStatus",
        ),
    ];
    let mut out = Vec::new();
    for (kind, ar, upgrading) in kinds {
        let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &ar);
        let list = api
            .list(&ListParams::default())
            .await
            .ctx(|| format!("listing {}s", ar.kind))?;
        for o in list.items {
            if o.meta().deletion_timestamp.is_some() {
                continue;
            }
            let rollout = o.name_any();
            let isb_rollout = (kind == Kind::Pipeline).then(|| {
                let spec = o
                    .data
                    .pointer("/spec/pipeline/spec")
                    .unwrap_or(&Value::Null);
                numaplane_core::child::isb_rollout_name(spec)
            });
            let children = child_instances(nctx, kind, ns, &rollout);
            let trial = o
                .data
                .pointer(&format!("/status/progressiveStatus/{upgrading}"))
                .and_then(|u| {
                    let name = u.get("name")?.as_str()?.to_string();
                    let on_trial = children
                        .iter()
                        .any(|(n, i, _)| *n == name && Some(i.as_str()) == trial_instance);
                    let held = u.get("awaitingControllerTrial") == Some(&Value::Bool(true));
                    let result = match u.get("assessmentResult").and_then(Value::as_str) {
                        _ if held => AssessmentResult::Success,
                        Some("Success") => AssessmentResult::Success,
                        Some("Failure") => AssessmentResult::Failure,
                        _ => AssessmentResult::Unknown,
                    };
                    on_trial.then_some((name, result))
                });
            let promoted_instance = children
                .iter()
                .filter(|(_, _, promoted)| *promoted)
                .map(|(_, i, _)| i.clone())
                .next_back();
            out.push(Listed {
                kind,
                rollout,
                isb_rollout,
                trial,
                promoted_instance,
            });
        }
    }
    Ok(out)
}

/// A rollout's cached children, oldest first: (name, instance, promoted).
fn child_instances(
    nctx: &NcCtx,
    kind: Kind,
    ns: &str,
    rollout: &str,
) -> Vec<(String, String, bool)> {
    fn rows<K: Resource>(mut v: Vec<Arc<K>>) -> Vec<(String, String, bool)> {
        v.sort_by_key(|c| c.meta().creation_timestamp.clone().map(|t| t.0));
        v.iter()
            .filter(|c| c.meta().deletion_timestamp.is_none())
            .map(|c| {
                let promoted = c
                    .meta()
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(labels::UPGRADE_STATE))
                    .map(String::as_str)
                    == Some(numaplane_api::keys::upgrade_state::PROMOTED);
                (
                    c.meta().name.clone().unwrap_or_default(),
                    instance_of(&**c).to_string(),
                    promoted,
                )
            })
            .collect()
    }
    let stores = &nctx.ctx.stores;
    match kind {
        Kind::IsbService => rows(stores.isbsvcs.children_of(ns, rollout)),
        Kind::Pipeline => rows(stores.pipelines.children_of(ns, rollout)),
        Kind::MonoVertex => rows(stores.monovertices.children_of(ns, rollout)),
        // The controllers themselves are the upgrade's subject, not a workload it carries.
        Kind::NumaflowController => Vec::new(),
    }
}

/// What one progressive pass did, for the rollout's status and next wake-up.
pub(super) struct Outcome {
    pub plan: Plan,
    /// The promoted controller as observed (for the rollout's health).
    pub promoted: Option<Arc<NumaflowController>>,
}

/// One pass. `None` when the rollout has no controller yet (the plain create path runs).
/// `trials`: a version change starts a controller trial (else it updates in place).
pub(super) async fn pass(
    r: &NumaflowControllerRollout,
    nctx: &NcCtx,
    recorded: Option<&ControllerProgressiveStatus>,
    trials: bool,
    now: &Time,
) -> Result<Option<Outcome>, Error> {
    let ns = r.ns();
    let rollout = r.name_any();
    let ncs = controllers(nctx, r);
    let children: Vec<ControllerChild<'_>> = ncs
        .iter()
        .map(|nc| {
            let reported = mirror_controller(nc);
            ControllerChild {
                name: nc.metadata.name.as_deref().unwrap_or_default(),
                instance_id: nc.spec.instance_id.as_deref().unwrap_or_default(),
                version: &nc.spec.version,
                deleting: nc.meta().deletion_timestamp.is_some(),
                available: if reported.status == HealthStatus::True {
                    Ok(())
                } else {
                    Err(reported.message)
                },
            }
        })
        .collect();
    let progressive = r
        .spec
        .strategy
        .as_ref()
        .and_then(|s| s.progressive.as_ref());
    let schedule = match progressive.and_then(|p| p.assessment_schedule.as_deref()) {
        Some(s) => AssessmentSchedule::parse(s, "spec.strategy.progressive.assessmentSchedule")
            .map_err(|e| Error::InvalidSpec(e.to_string()))?,
        None => DEFAULT_SCHEDULE,
    };
    let max_parallel = progressive
        .and_then(|p| p.max_parallel)
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(DEFAULT_MAX_PARALLEL);
    let in_use = instances_in_use(nctx, ns);
    let desired_version = r.spec.controller.version.as_str();
    let base = r.spec.controller.instance_id.as_deref().unwrap_or_default();
    // The workloads are listed only while a trial runs or is about to start.
    let upgrading = recorded.and_then(|s| s.upgrading_controller_status.as_ref());
    let promoted_version = recorded
        .and_then(|s| s.promoted_controller_status.as_ref())
        .map(|p| p.version.as_str())
        .or_else(|| {
            children
                .iter()
                .find(|c| c.name == rollout)
                .map(|c| c.version)
        });
    let listed = match upgrading {
        Some(u) if u.assessment_result != Some(AssessmentResult::Failure) => {
            workloads(nctx, ns, Some(&u.controller.instance_id)).await?
        }
        None if trials && promoted_version.is_some_and(|v| v != desired_version) => {
            workloads(nctx, ns, None).await?
        }
        _ => Vec::new(),
    };
    let workloads: Vec<Workload<'_>> = listed
        .iter()
        .map(|w| Workload {
            kind: w.kind,
            rollout: &w.rollout,
            isb_rollout: w.isb_rollout.as_deref(),
            trial: w.trial.as_ref().map(|(n, res)| (n.as_str(), *res)),
            promoted_instance: w.promoted_instance.as_deref(),
        })
        .collect();
    let Some(p) = plan(&Input {
        now: now.0,
        rollout: &rollout,
        base_instance: base,
        desired_version,
        schedule,
        max_parallel,
        trials,
        recorded,
        children: &children,
        workloads: &workloads,
        instances_in_use: &in_use,
    }) else {
        return Ok(None);
    };
    let promoted_name = p
        .status
        .promoted_controller_status
        .as_ref()
        .map(|c| c.name.clone());
    let promoted = ncs
        .iter()
        .find(|nc| nc.metadata.name == promoted_name)
        .cloned();
    Ok(Some(Outcome { plan: p, promoted }))
}

/// Carries out the plan's actions (after its status was recorded), then labels the promoted
/// controller `promoted` if it is not yet (a trial that was just promoted).
pub(super) async fn act(
    r: &NumaflowControllerRollout,
    nctx: &NcCtx,
    actions: &[Action],
    promoted: Option<&NumaflowController>,
) -> Result<(), Error> {
    let ns = r.ns();
    if let Some(nc) = promoted.filter(|nc| !super::child::labelled(nc, r, upgrade_state::PROMOTED))
    {
        info!(name = %nc.name_any(), "labelling the promoted NumaflowController");
        super::child::apply(r, nctx, &nc.name_any(), &nc.spec, upgrade_state::PROMOTED).await?;
    }
    for a in actions {
        match a {
            Action::Create(c) => {
                info!(name = %c.name, instance = %c.instance_id, version = %c.version,
                    "creating trial NumaflowController");
                super::child::apply(r, nctx, &c.name, &spec_of(c), upgrade_state::TRIAL).await?;
            }
            Action::Update(c) => {
                info!(name = %c.name, version = %c.version, "updating the promoted NumaflowController in place");
                super::child::apply(r, nctx, &c.name, &spec_of(c), upgrade_state::PROMOTED).await?;
            }
            Action::Delete(name) => {
                info!(%name, "deleting retired NumaflowController");
                super::child::delete(r, nctx, ns, name).await?;
            }
        }
    }
    Ok(())
}

fn spec_of(c: &ControllerInstance) -> NumaflowControllerSpec {
    NumaflowControllerSpec {
        version: c.version.clone(),
        instance_id: (!c.instance_id.is_empty()).then(|| c.instance_id.clone()),
    }
}
