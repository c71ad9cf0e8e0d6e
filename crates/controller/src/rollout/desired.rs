//! The child and riders a rollout wants, rendered from its spec.

use super::kind::Rollout;
use super::placement::Resolved;
use crate::children::{ChildObject, DesiredChild};
use crate::context::Ctx;
use crate::error::Error;
use kube::ResourceExt;
use numaplane_api::common::ChildMetadata;
use numaplane_core::template::TemplateVars;
use serde_json::Value;

/// The riders the rollout wants for `child` (templated with its name, per vertex where asked).
pub(crate) fn desired_riders<R: Rollout>(
    obj: &R,
    ctx: &Ctx,
    child: &R::Child,
) -> Result<Vec<numaplane_core::riders::DesiredRider>, Error> {
    let ns = obj.namespace().unwrap_or_default();
    let name = child.name_any();
    let vertices = numaplane_core::child::vertex_names(child.spec());
    Ok(numaplane_core::riders::desired_riders(
        &obj.rider_specs(),
        &name,
        &ns,
        |vertex| match vertex {
            Some(v) => TemplateVars::pipeline_vertex(&name, &ns, v),
            None => R::template_vars(&name, &ns),
        },
        &vertices,
        &ctx.settings.controller().permitted_riders,
    )?)
}

/// The child as the rollout wants it: templated metadata and spec, Numaplane's labels, a
/// controller owner reference.
pub(crate) fn desired_child<R: Rollout>(
    obj: &R,
    resolved: &Resolved<R::Resolved>,
    child_name: &str,
    metadata: Option<&ChildMetadata>,
    spec: &Value,
) -> Result<DesiredChild, Error> {
    let ns = obj.namespace().unwrap_or_default();
    let vars = R::template_vars(child_name, &ns);
    let field = R::SPEC_PATH.strip_suffix(".spec").unwrap_or(R::SPEC_PATH);
    let rendered =
        numaplane_core::child::render_child(&obj.name_any(), field, metadata, spec, &vars)?;
    let owner = obj
        .controller_owner_ref(&())
        .ok_or_else(|| Error::InvalidSpec("rollout has no uid yet".into()))?;
    let mut desired = DesiredChild {
        name: child_name.to_string(),
        namespace: ns,
        labels: rendered.labels,
        annotations: rendered.annotations,
        owner,
        spec: rendered.spec,
    };
    obj.customize(&resolved.kind, &mut desired);
    super::placement::apply(&resolved.placement, &mut desired);
    Ok(desired)
}
