//! Pause requests of ISBServiceRollouts and NumaflowControllerRollouts (docs/compatibility.md,
//! docs/strategies.md, docs/install.md).
//!
//! A requesting rollout records its request durably: `status.upgradeInProgress:
//! PipelinePauseAndDrain`. PipelineRollouts read it from the watch caches (their ISBServiceRollout
//! and every NumaflowControllerRollout of their namespace), so a restarted controller neither
//! resumes a pipeline too early nor forgets the request.

use crate::context::{Ctx, Stores};
use crate::error::{Error, KubeContext, is_not_found};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kube::runtime::reflector::ObjectRef;
use numaplane_api::PipelineRollout;
use numaplane_api::common::{PauseStatus, Status};
use numaplane_api::keys::{annotations, condition, labels, message, reason};
use numaplane_api::numaflow::Pipeline;
use numaplane_core::conditions::set_condition;
use numaplane_core::health::HealthStatus;
use serde_json::Value;

/// The rollouts currently asking the pipelines of PipelineRollouts on ISBServiceRollout
/// `isb_rollout` in `ns` to pause, described for messages (empty: none).
pub fn requests_for_pipeline(stores: &Stores, ns: &str, isb_rollout: &str) -> Vec<String> {
    let requesting = |s: Option<&Status>| s.is_some_and(numaplane_core::ppnd::requests_pause);
    let mut out: Vec<String> = stores
        .isb_rollouts
        .get(&ObjectRef::new(isb_rollout).within(ns))
        .into_iter()
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

/// When ISBServiceRollout `isb_rollout` began asking its pipelines to pause for an update that
/// needs them drained (`status.pauseNeedsDrain`), as RFC 3339; `None` when it does not.
pub fn drain_requested_since(stores: &Stores, ns: &str, isb_rollout: &str) -> Option<String> {
    let r = stores
        .isb_rollouts
        .get(&ObjectRef::new(isb_rollout).within(ns))?;
    let st = r.status.as_ref()?;
    if !(numaplane_core::ppnd::requests_pause(&st.status) && st.pause_needs_drain) {
        return None;
    }
    let begin = st
        .pause_request_status
        .as_ref()?
        .last_pause_begin_time
        .as_ref()?;
    Some(begin.0.to_string())
}

fn phase(status: Option<&Value>) -> &str {
    status
        .and_then(|s| s.get("phase"))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// What a pause request needs of each pipeline before the update it guards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Paused, or won't pause (phase Failed): an update that keeps the buffers.
    Paused,
    /// Paused with `drainedOnPause` and still asked to pause: the buffers are deleted (an ISB
    /// service recreate), so Failed or an undrained pause is not enough. Fail closed: the
    /// reference recreated once each was Paused or Failed, drained or not.
    Drained,
}

/// The pipelines a pause request looked at, by what it found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PauseCheck {
    /// Not yet as [`Need`] asks, as `name (phase)`: the update waits for them.
    pub waiting: Vec<String>,
    /// Not as asked, but their PipelineRollout allows data loss (or is gone).
    pub allowed: Vec<String>,
    /// As asked.
    pub ready: Vec<String>,
}

impl PauseCheck {
    /// For the Event of the update: which pipelines were ready and which lose data by allowance.
    pub fn describe(&self, need: Need) -> String {
        let ready = match need {
            Need::Paused => "paused",
            Need::Drained => "paused and drained",
        };
        let mut out = if self.ready.is_empty() {
            format!("no pipeline {ready}")
        } else {
            format!("{ready}: {}", self.ready.join(", "))
        };
        if !self.allowed.is_empty() {
            out.push_str(&format!(
                "; not {ready}, data loss allowed by {}: {}",
                annotations::ALLOW_DATA_LOSS,
                self.allowed.join(", ")
            ));
        }
        out
    }
}

/// The ISB service a check is about: the rollout's pipelines by label, and any other pipeline
/// naming its child in `spec.interStepBufferServiceName`.
#[derive(Debug, Clone, Copy)]
pub struct OnIsb<'a> {
    pub rollout: &'a str,
    pub child: &'a str,
}

/// Sorts the pipelines (on the ISB service `on`, or all of the namespace when `None`) by whether
/// they are as `need` asks; a pipeline that is not, on a PipelineRollout annotated
/// `allow-data-loss: "true"` (or gone), does not hold the update. A pipeline no PipelineRollout
/// manages holds it only when the ISB service is recreated (its buffers deleted): Numaplane cannot
/// pause it, so the recreate waits until its owner pauses and drains it or deletes it.
/// PipelineRollouts are read live.
pub async fn check_pipelines(
    ctx: &Ctx,
    ns: &str,
    on: Option<OnIsb<'_>>,
    need: Need,
) -> Result<PauseCheck, Error> {
    let mut out = PauseCheck::default();
    let prs: Api<PipelineRollout> = Api::namespaced(ctx.client.clone(), ns);
    let mut pipelines: Vec<_> = ctx.stores.pipelines.filtered(|m| {
        m.namespace.as_deref() == Some(ns)
            && m.deletion_timestamp.is_none()
            && on.is_none_or(|on| {
                m.labels
                    .as_ref()
                    .and_then(|l| l.get(labels::ISBSVC_NAME))
                    .map(String::as_str)
                    == Some(on.rollout)
            })
    });
    // A recreate deletes the buffers under every pipeline naming the ISB service: those no
    // PipelineRollout manages are not cached (the watch selects Numaplane's), so listed live.
    if let Some(on) = on.filter(|_| need == Need::Drained) {
        pipelines.extend(
            unmanaged_on(ctx, ns, on.child)
                .await?
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .map(std::sync::Arc::new),
        );
    }
    pipelines.sort_by_key(|p| p.name_any());
    for p in pipelines {
        let ph = phase(p.status.as_ref());
        let as_asked = match need {
            Need::Paused => ph == "Paused" || ph == "Failed",
            Need::Drained => {
                let view = numaplane_core::child::SpecView(&p.spec);
                ph == "Paused"
                    && view.wants_paused()
                    && p.status
                        .as_ref()
                        .and_then(|s| s.get("drainedOnPause"))
                        .and_then(Value::as_bool)
                        == Some(true)
            }
        };
        if as_asked {
            out.ready.push(p.name_any());
            continue;
        }
        let ph = if ph.is_empty() { "Unknown" } else { ph };
        let described = match p.annotations().get(annotations::DRAIN_ATTEMPTS) {
            Some(a)
                if need == Need::Drained
                    && ph == "Paused"
                    && numaplane_core::child::SpecView(&p.spec).wants_paused() =>
            {
                format!(
                    "{} (Paused without draining; resumed to drain again {} of {} times)",
                    p.name_any(),
                    a.split(' ').next().unwrap_or_default(),
                    numaplane_core::ppnd::drain_retry::DRAIN_ATTEMPTS
                )
            }
            _ => format!("{} ({ph})", p.name_any()),
        };
        let allowed = match p.labels().get(labels::PARENT_ROLLOUT_NAME) {
            // Not Numaplane's to pause: its data is lost only if the ISB service goes.
            None if need == Need::Drained => {
                out.waiting
                    .push(format!("{described}, not managed by Numaplane"));
                continue;
            }
            None => true,
            Some(parent) => match prs.get(parent).await {
                Ok(pr) => pr
                    .annotations()
                    .get(annotations::ALLOW_DATA_LOSS)
                    .is_some_and(|v| v == "true"),
                Err(e) if is_not_found(&e) => true,
                Err(e) => return Err(e).ctx(|| format!("reading PipelineRollout {parent}")),
            },
        };
        if allowed {
            out.allowed.push(described);
        } else {
            out.waiting.push(described);
        }
    }
    Ok(out)
}

/// The pipelines no PipelineRollout manages that run on InterStepBufferService `isbsvc` of
/// namespace `ns`, read live (the watch caches only Numaplane's): recreating or deleting it
/// would take their buffers.
pub async fn unmanaged_on(ctx: &Ctx, ns: &str, isbsvc: &str) -> Result<Vec<Pipeline>, Error> {
    let unlabelled = ListParams::default().labels(&format!("!{}", labels::PARENT_ROLLOUT_NAME));
    Ok(Api::<Pipeline>::namespaced(ctx.client.clone(), ns)
        .list(&unlabelled)
        .await
        .ctx(|| format!("listing the pipelines of namespace {ns} no rollout manages"))?
        .items
        .into_iter()
        .filter(|p| numaplane_core::child::SpecView(&p.spec).isbsvc_or_default() == isbsvc)
        .collect())
}

/// `PausingPipelines` and `pauseRequestStatus` of a requesting rollout, from whether its request
/// is active (`status.upgradeInProgress`).
pub fn report(st: &mut Status, prs: &mut Option<PauseStatus>, generation: i64, now: &Time) {
    let requesting = numaplane_core::ppnd::requests_pause(st);
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

fn secs_between(from: &Time, to: &Time) -> f64 {
    let d = to.0.duration_since(from.0);
    d.as_secs_f64().max(0.0)
}

fn after(a: Option<&Time>, b: Option<&Time>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a.0 > b.0,
        (Some(_), None) => true,
        _ => false,
    }
}

/// Seconds a rollout has requested pipelines to pause: up to `now` while requesting, the last
/// request's length once released (the reference sets it once at release), else 0.
pub fn request_seconds(ps: Option<&PauseStatus>, requesting: bool, now: &Time) -> f64 {
    let Some(ps) = ps else { return 0.0 };
    let begin = ps.last_pause_begin_time.as_ref();
    let end = ps.last_pause_end_time.as_ref();
    match (begin, requesting) {
        (Some(b), true) => secs_between(b, now),
        (Some(b), false) if after(end, Some(b)) => end.map_or(0.0, |e| secs_between(b, e)),
        _ => 0.0,
    }
}

/// `(pausing, paused)` seconds of a pipeline paused by Numaplane (`system`), from its
/// `pauseStatus`; both 0 for a pause the user asked for, or when it isn't pausing.
pub fn pipeline_pause_seconds(ps: Option<&PauseStatus>, system: bool, now: &Time) -> (f64, f64) {
    let Some(ps) = ps.filter(|_| system) else {
        return (0.0, 0.0);
    };
    let begin = ps.last_pause_begin_time.as_ref();
    if !after(begin, ps.last_pause_end_time.as_ref()) {
        return (0.0, 0.0);
    }
    let changed = ps.last_pause_phase_change_time.as_ref();
    match (begin, changed) {
        (Some(_), Some(c)) if after(Some(c), begin) => (0.0, secs_between(c, now)),
        (Some(b), _) => (secs_between(b, now), 0.0),
        _ => (0.0, 0.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(1_800_000_000 + secs).expect("time"))
    }

    fn ps(begin: Option<i64>, change: Option<i64>, end: Option<i64>) -> PauseStatus {
        PauseStatus {
            last_pause_begin_time: begin.map(t),
            last_pause_phase_change_time: change.map(t),
            last_pause_end_time: end.map(t),
        }
    }

    #[test]
    fn request_seconds_count_while_requesting_then_keep_the_last_length() {
        assert_eq!(request_seconds(None, true, &t(10)), 0.0);
        assert_eq!(
            request_seconds(Some(&ps(Some(0), None, None)), true, &t(10)),
            10.0
        );
        assert_eq!(
            request_seconds(Some(&ps(Some(0), None, Some(7))), false, &t(10)),
            7.0
        );
        // A new request after an old one counts from its own begin.
        assert_eq!(
            request_seconds(Some(&ps(Some(20), None, Some(7))), true, &t(25)),
            5.0
        );
        assert_eq!(
            request_seconds(Some(&ps(None, None, None)), false, &t(25)),
            0.0
        );
    }

    #[test]
    fn pipeline_pause_seconds_split_pausing_from_paused() {
        let now = t(30);
        assert_eq!(
            pipeline_pause_seconds(Some(&ps(Some(10), None, None)), true, &now),
            (20.0, 0.0)
        );
        assert_eq!(
            pipeline_pause_seconds(Some(&ps(Some(10), Some(25), None)), true, &now),
            (0.0, 5.0)
        );
        // Resumed, or paused by the user: nothing to report.
        assert_eq!(
            pipeline_pause_seconds(Some(&ps(Some(10), Some(25), Some(28))), true, &now),
            (0.0, 0.0)
        );
        assert_eq!(
            pipeline_pause_seconds(Some(&ps(Some(10), Some(25), None)), false, &now),
            (0.0, 0.0)
        );
        // A phase change from an earlier pause does not count for a new one.
        assert_eq!(
            pipeline_pause_seconds(Some(&ps(Some(26), Some(25), Some(20))), true, &now),
            (4.0, 0.0)
        );
    }
}
