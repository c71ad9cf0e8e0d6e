//! Pause requests of ISBServiceRollouts and NumaflowControllerRollouts (api.md §14,
//! progressive.md §8.4, numaflow-controller-and-riders.md §1.5).
//!
//! A requesting rollout records its request durably: `status.upgradeInProgress:
//! PipelinePauseAndDrain`. PipelineRollouts read it from the watch caches (their ISBServiceRollout
//! and every NumaflowControllerRollout of their namespace), so a restarted controller neither
//! resumes a pipeline too early nor forgets the request.

use crate::context::{Ctx, Stores};
use crate::error::{Error, KubeContext, is_not_found};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::Api;
use kube::{Resource, ResourceExt};
use numaplane_api::PipelineRollout;
use numaplane_api::common::{PauseStatus, Status, UpgradeStrategy};
use numaplane_api::keys::{annotations, condition, labels, message, reason};
use numaplane_core::conditions::set_condition;
use numaplane_core::health::HealthStatus;
use serde_json::Value;

/// The rollouts currently asking the pipelines of PipelineRollouts on ISBServiceRollout
/// `isb_rollout` in `ns` to pause, described for messages (empty: none).
pub fn requests_for_pipeline(stores: &Stores, ns: &str, isb_rollout: &str) -> Vec<String> {
    let requesting = |s: Option<&Status>| {
        s.is_some_and(|s| s.upgrade_in_progress == UpgradeStrategy::PipelinePauseAndDrain)
    };
    let mut out: Vec<String> = stores
        .isb_rollouts
        .state()
        .iter()
        .filter(|r| r.namespace().as_deref() == Some(ns) && r.name_any() == isb_rollout)
        .filter(|r| requesting(r.status.as_ref().map(|s| &s.status)))
        .map(|r| format!("ISBServiceRollout {}", r.name_any()))
        .collect();
    out.extend(
        stores
            .nc_rollouts
            .state()
            .iter()
            .filter(|r| r.namespace().as_deref() == Some(ns))
            .filter(|r| requesting(r.status.as_ref().map(|s| &s.status)))
            .map(|r| format!("NumaflowControllerRollout {}", r.name_any())),
    );
    out
}

fn phase(status: Option<&Value>) -> &str {
    status
        .and_then(|s| s.get("phase"))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The pipelines (of `isb_rollout`, or all of the namespace when `None`) that are neither
/// Paused nor "won't pause" (phase Failed, or their PipelineRollout annotated
/// `allow-data-loss: "true"`), as `name (phase)`. PipelineRollouts are read live.
pub async fn pipelines_not_paused(
    ctx: &Ctx,
    ns: &str,
    isb_rollout: Option<&str>,
) -> Result<Vec<String>, Error> {
    let mut out = Vec::new();
    let prs: Api<PipelineRollout> = Api::namespaced(ctx.client.clone(), ns);
    let mut pipelines: Vec<_> = ctx
        .stores
        .pipelines
        .state()
        .into_iter()
        .filter(|p| p.namespace().as_deref() == Some(ns) && p.meta().deletion_timestamp.is_none())
        .filter(|p| {
            isb_rollout
                .is_none_or(|i| p.labels().get(labels::ISBSVC_NAME).map(String::as_str) == Some(i))
        })
        .collect();
    pipelines.sort_by_key(|p| p.name_any());
    for p in pipelines {
        let ph = phase(p.status.as_ref());
        if ph == "Paused" || ph == "Failed" {
            continue;
        }
        let Some(parent) = p.labels().get(labels::PARENT_ROLLOUT_NAME) else {
            continue;
        };
        let allowed = match prs.get(parent).await {
            Ok(pr) => pr
                .annotations()
                .get(annotations::ALLOW_DATA_LOSS)
                .is_some_and(|v| v == "true"),
            Err(e) if is_not_found(&e) => true,
            Err(e) => return Err(e).ctx(|| format!("reading PipelineRollout {parent}")),
        };
        if !allowed {
            let ph = if ph.is_empty() { "Unknown" } else { ph };
            out.push(format!("{} ({ph})", p.name_any()));
        }
    }
    Ok(out)
}

/// `PausingPipelines` and `pauseRequestStatus` of a requesting rollout, from whether its request
/// is active (`status.upgradeInProgress`).
pub fn report(st: &mut Status, prs: &mut Option<PauseStatus>, generation: i64, now: &Time) {
    let requesting = st.upgrade_in_progress == UpgradeStrategy::PipelinePauseAndDrain;
    let (status, r, m) = if requesting {
        (HealthStatus::True, reason::PAUSE, message::PAUSE_NEEDED)
    } else {
        (
            HealthStatus::False,
            reason::NO_PAUSE,
            message::NO_PAUSE_NEEDED,
        )
    };
    set_condition(
        &mut st.conditions,
        condition::PAUSING_PIPELINES,
        status,
        r,
        m,
        generation,
        now.clone(),
    );
    let after = |a: &Option<Time>, b: &Option<Time>| match (a, b) {
        (Some(a), Some(b)) => a.0 > b.0,
        (Some(_), None) => true,
        _ => false,
    };
    let ps = prs.get_or_insert_with(Default::default);
    if requesting {
        if !after(&ps.last_pause_begin_time, &ps.last_pause_end_time) {
            ps.last_pause_begin_time = Some(now.clone());
        }
    } else if after(&ps.last_pause_begin_time, &ps.last_pause_end_time) {
        ps.last_pause_end_time = Some(now.clone());
    }
    if *ps == PauseStatus::default() {
        *prs = None;
    }
}
