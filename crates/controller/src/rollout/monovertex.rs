//! MonoVertexRollout: keeps the autoscaled `spec.replicas` of the live MonoVertex (unless the
//! user resumes it slowly) and publishes the promoted pod selector for VPAs.

use super::kind::{Resolution, Rollout};
use crate::child_cache::ChildCache;
use crate::context::{Ctx, Stores};
use crate::error::Error;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use numaplane_api::common::ChildMetadata;
use numaplane_api::keys::{condition, labels};
use numaplane_api::numaflow::MonoVertex;
use numaplane_api::{Kind, MonoVertexRollout, MonoVertexRolloutStatus};
use numaplane_core::desired::KindInputs;
use numaplane_core::health::{self, Health, HealthStatus};
use numaplane_core::riders::RiderSpec;
use serde_json::Value;

fn fast_resume(r: &MonoVertexRollout) -> bool {
    {
        r.spec
            .strategy
            .as_ref()
            .and_then(|s| s.pause_resume.as_ref())
            .and_then(|p| p.fast_resume)
            .unwrap_or(false)
    }
}

/// `app.kubernetes.io/component=mono-vertex,numaflow.numaproj.io/mono-vertex-name=<child>`
pub fn pod_selector(child: &str) -> String {
    format!(
        "{}=mono-vertex,{}={child}",
        labels::APP_COMPONENT,
        labels::NUMAFLOW_MONO_VERTEX_NAME
    )
}

impl Rollout for MonoVertexRollout {
    type Child = MonoVertex;
    type Status = MonoVertexRolloutStatus;
    type Resolved = ();

    fn child_template(&self) -> (Option<&ChildMetadata>, &Value) {
        (
            self.spec.mono_vertex.metadata.as_ref(),
            &self.spec.mono_vertex.spec,
        )
    }

    fn rider_specs(&self) -> Vec<RiderSpec> {
        super::kind::rider_specs(&self.spec.riders)
    }

    fn progressive_strategy(&self) -> Option<super::kind::ProgressiveOf<'_>> {
        let s = self.spec.strategy.as_ref();
        Some((
            Kind::MonoVertex,
            s.and_then(|s| s.progressive.as_ref()),
            s.and_then(|s| s.analysis.as_ref()),
        ))
    }

    fn read_record(st: &MonoVertexRolloutStatus) -> numaplane_core::progressive::Record {
        numaplane_core::progressive::Record::from_monovertex(st)
    }

    fn write_record(rec: &numaplane_core::progressive::Record, st: &mut MonoVertexRolloutStatus) {
        rec.write_monovertex(st)
    }

    fn status_of(&self) -> Option<&Self::Status> {
        self.status.as_ref()
    }

    fn children(stores: &Stores) -> &ChildCache<MonoVertex> {
        &stores.monovertices
    }

    fn validate(spec: &Value) -> Result<(), Error> {
        numaplane_core::child::validate_monovertex_spec(spec, Self::KIND.spec_path())
            .map_err(|e| Error::InvalidSpec(format!("invalid Numaflow MonoVertex spec: {e}")))
    }

    async fn resolve(&self, _ctx: &Ctx) -> Result<Resolution<()>, Error> {
        Ok(Resolution::Ready(()))
    }

    fn kind_inputs<'a>(&'a self, _: &'a ()) -> KindInputs<'a> {
        KindInputs::MonoVertex {
            fast_resume: fast_resume(self),
        }
    }

    fn health(_ctx: &Ctx, child: &MonoVertex) -> Health {
        health::monovertex_health(&child.to_json())
    }

    fn still_coming_up(_ctx: &Ctx, child: &MonoVertex) -> bool {
        health::numaflow_catching_up(&child.to_json())
    }

    fn observe_child(
        st: &mut MonoVertexRolloutStatus,
        child: &MonoVertex,
        generation: i64,
        now: &Time,
    ) {
        let (paused, reason, message) = health::monovertex_paused(&child.to_json());
        numaplane_core::conditions::set_condition(
            &mut st.status.conditions,
            condition::MONO_VERTEX_PAUSING_OR_PAUSED,
            if paused {
                HealthStatus::True
            } else {
                HealthStatus::False
            },
            reason,
            message,
            generation,
            now.clone(),
        );
        st.promoted_pod_selector = pod_selector(&child.name_any());
    }
}
