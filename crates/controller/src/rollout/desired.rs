//! The child and riders a rollout wants, rendered from its spec.

use super::kind::Rollout;
use super::placement::Resolved;
use crate::children::{ChildObject, DesiredChild};
use crate::context::Ctx;
use crate::error::Error;
use kube::ResourceExt;
use numaplane_api::Namespaced;
use numaplane_api::common::ChildMetadata;
use numaplane_core::desired::{Inputs, LiveChild, desired};
use numaplane_core::template::TemplateVars;
use serde_json::Value;

/// The riders the rollout wants for `child` (templated with its name, per vertex where asked).
pub(crate) fn desired_riders<R: Rollout>(
    obj: &R,
    ctx: &Ctx,
    child: &R::Child,
) -> Result<Vec<numaplane_core::riders::DesiredRider>, Error> {
    let ns = obj.ns();
    let name = child.name_any();
    let vertices = numaplane_core::child::vertex_names(child.spec());
    Ok(numaplane_core::riders::desired_riders(
        &obj.rider_specs(),
        &name,
        ns,
        |vertex| match vertex {
            Some(v) => TemplateVars::pipeline_vertex(&name, ns, v),
            None => TemplateVars::for_child(R::KIND, &name, ns),
        },
        &vertices,
        &ctx.settings.controller().permitted_riders,
    )?)
}

/// The child as the rollout wants it under `child_name` (core's [`desired`]), with a
/// controller owner reference; `live` is the child of that name it is compared with, if any.
pub(crate) fn desired_child<R: Rollout>(
    obj: &R,
    resolved: &Resolved<R::Resolved>,
    child_name: &str,
    upgrade_state: &str,
    template: (Option<&ChildMetadata>, &Value),
    live: Option<&R::Child>,
) -> Result<DesiredChild, Error> {
    let ns = obj.ns();
    let (metadata, template) = template;
    let rendered = desired(&Inputs {
        rollout: &obj.name_any(),
        namespace: ns,
        child: child_name,
        upgrade_state,
        metadata,
        template,
        kind: obj.kind_inputs(&resolved.kind),
        instance: resolved.placement.instance.as_deref(),
        live: live.map(|l| LiveChild {
            annotations: l.annotations(),
            spec: l.spec(),
            phase: l
                .status()
                .and_then(|s| s.get("phase"))
                .and_then(Value::as_str)
                .unwrap_or_default(),
        }),
    })?;
    let owner = obj
        .controller_owner_ref(&())
        .ok_or_else(|| Error::InvalidSpec("rollout has no uid yet".into()))?;
    Ok(DesiredChild {
        name: child_name.to_string(),
        namespace: ns.to_string(),
        labels: rendered.labels,
        annotations: rendered.annotations,
        owner,
        spec: rendered.spec,
    })
}
