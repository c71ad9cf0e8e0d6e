//! Shared pieces of the scenario suites (CONTRIBUTING.md under each strategy): readiness
//! predicates over the four rollout kinds and the scenario manifests.

use numaplane_api::common::{Phase, Status, UpgradeStrategy};
use numaplane_api::numaflow::{InterStepBufferService, MonoVertex, Pipeline};
use numaplane_api::{
    ISBServiceRollout, MonoVertexRollout, NumaflowControllerRollout, PipelineRollout,
};
use serde_json::{Value, json};

use super::condition;

pub const ISB: &str = "isb";
pub const TAG: &str = "{{.pipeline-namespace}}-{{.pipeline-name}}";
pub const CAT: &str = "quay.io/numaio/numaflow-go/map-cat:stable";
pub const BAD_CAT: &str = "quay.io/numaio/numaflow-go/map-badcat:stable";
pub const MV_IMAGE: &str = "quay.io/numaio/numaflow-go/source-simple-source:stable";
pub const MV_JAVA: &str = "quay.io/numaio/numaflow-java/source-simple-source:stable";
pub const MV_BAD: &str = "quay.io/numaio/numaflow-java/source-simple-source:invalid";

/// `status.progressiveStatus.upgradingPipelineStatus` of a PipelineRollout, if any.
pub fn upgrading_pipeline(
    r: &PipelineRollout,
) -> Option<&numaplane_api::pipeline_rollout::UpgradingPipelineStatus> {
    r.status
        .as_ref()?
        .progressive_status
        .as_ref()?
        .upgrading_pipeline_status
        .as_ref()
}

/// The common status and generation of the four rollout kinds.
pub trait Rollout {
    fn common(&self) -> Option<&Status>;
    fn generation(&self) -> i64;
}

macro_rules! rollout {
    ($($t:ty),*) => {$(
        impl Rollout for $t {
            fn common(&self) -> Option<&Status> {
                self.status.as_ref().map(|s| &s.status)
            }
            fn generation(&self) -> i64 {
                self.metadata.generation.unwrap_or(-1)
            }
        }
    )*};
}
rollout!(
    PipelineRollout,
    MonoVertexRollout,
    ISBServiceRollout,
    NumaflowControllerRollout
);

/// Deployed, nothing in progress, current generation observed, child healthy.
pub fn settled<R: Rollout>(r: Option<&R>) -> Option<()> {
    let r = r?;
    let st = r.common()?;
    (st.phase == Phase::Deployed
        && st.upgrade_in_progress == UpgradeStrategy::NoOp
        && st.observed_generation == r.generation()
        && condition(&st.conditions, "ChildResourcesHealthy")?.0 == "True")
        .then_some(())
}

/// Deployed with nothing in progress (what the scenarios hold for a while; health may dip
/// while a resumed pipeline scales back up).
pub fn deployed_idle<R: Rollout>(r: Option<&R>) -> bool {
    r.and_then(Rollout::common).is_some_and(|st| {
        st.phase == Phase::Deployed && st.upgrade_in_progress == UpgradeStrategy::NoOp
    })
}

pub fn not_in_progress<R: Rollout>(r: Option<&R>) -> bool {
    r.and_then(Rollout::common)
        .is_some_and(|st| st.upgrade_in_progress == UpgradeStrategy::NoOp)
}

pub fn isb(version: &str, volume: &str, memory: Option<&str>) -> Value {
    let mut js = json!({"version": version, "persistence": {"volumeSize": volume}});
    if let Some(m) = memory {
        js["containerTemplate"] = json!({"resources": {"limits": {"memory": m}}});
    }
    super::fixtures::isb_rollout(ISB, js)
}

/// MonoVertexRollout `mvr`: a user-defined source of `image` (1–2 pods) into a blackhole.
pub fn mvr(image: &str) -> Value {
    mvr_scaled(image, 1, 2)
}

/// [`mvr`] with `min`–`max` pods.
pub fn mvr_scaled(image: &str, min: i64, max: i64) -> Value {
    json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "MonoVertexRollout",
        "metadata": {"name": "mvr"},
        "spec": {"monoVertex": {"spec": {
            "scale": {"min": min, "max": max},
            "source": {"udsource": {"container": {"image": image}}},
            "sink": {"blackhole": {}}
        }}}
    })
}

pub fn two_vertices(grace_seconds: i64) -> Value {
    json!({
        "interStepBufferServiceName": ISB,
        "lifecycle": {"pauseGracePeriodSeconds": grace_seconds},
        "vertices": [
            {"name": "in", "scale": {"min": 1, "max": 2},
             "source": {"generator": {"rpu": 5, "duration": "1s"}}},
            {"name": "out", "scale": {"min": 1, "max": 1}, "sink": {"log": {}}}
        ],
        "edges": [{"from": "in", "to": "out"}]
    })
}

pub fn three_vertices(cat_image: &str, grace_seconds: i64) -> Value {
    let mut spec = two_vertices(grace_seconds);
    spec["vertices"] = json!([
        {"name": "in", "scale": {"min": 1, "max": 2},
         "source": {"generator": {"rpu": 5, "duration": "1s"}}},
        {"name": "cat", "scale": {"min": 1, "max": 1},
         "udf": {"container": {"image": cat_image, "env": [{"name": "my-env", "value": TAG}]}}},
        {"name": "out", "scale": {"min": 1, "max": 1}, "sink": {"log": {}}}
    ]);
    spec["edges"] = json!([{"from": "in", "to": "cat"}, {"from": "cat", "to": "out"}]);
    spec
}

pub fn js(i: &InterStepBufferService, pointer: &str) -> Value {
    i.spec
        .pointer(&format!("/jetstream{pointer}"))
        .cloned()
        .unwrap_or(Value::Null)
}

pub fn vertex_count(p: &Pipeline) -> usize {
    p.spec["vertices"].as_array().map_or(0, Vec::len)
}

pub fn mv_image(mv: &MonoVertex) -> &str {
    mv.spec
        .pointer("/source/udsource/container/image")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// `status.upgradeHistory` as (child, strategy, outcome), oldest first.
pub fn history_outcomes(
    st: &Status,
) -> Vec<(
    String,
    UpgradeStrategy,
    Option<numaplane_api::common::UpgradeOutcome>,
)> {
    st.upgrade_history
        .iter()
        .map(|r| (r.child.clone(), r.strategy, r.outcome))
        .collect()
}
