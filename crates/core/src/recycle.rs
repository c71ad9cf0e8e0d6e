//! Recycling of replaced pipelines (docs/strategies.md, docs/compatibility.md "Recycling Pipelines"):
//! one pure step per pass deciding whether a `recyclable` pipeline is deleted, drained with its
//! own spec, force-drained with the promoted spec, scaled to zero, or waited on. Everything the
//! step needs is in the pipeline (labels, annotations, spec, status) and the rollout, so a
//! restarted controller continues where it stopped.

use crate::child::{ChildView, SpecView};
use k8s_openapi::jiff::{self as jiff, Timestamp};
use numaplane_api::keys::{annotations, upgrade_state_reason};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

/// Outcome reported in the `progressive_pipeline_drains` metric and the Event reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainResult {
    StandardDrain,
    ForceDrain,
    DrainNotRequired,
    DrainIncomplete,
}

impl DrainResult {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::StandardDrain => "StandardDrain",
            Self::ForceDrain => "ForceDrain",
            Self::DrainNotRequired => "DrainNotRequired",
            Self::DrainIncomplete => "DrainIncomplete",
        }
    }

    /// Whether the pipeline drained (the metric's `drainComplete` label).
    pub fn complete(self) -> bool {
        matches!(self, Self::StandardDrain | Self::ForceDrain)
    }

    /// Normal Event for a drain, Warning when data may be left behind or none was needed.
    pub fn is_warning(self) -> bool {
        !self.complete()
    }
}

/// Whether a recyclable pipeline is drained with its own spec before a force drain: every reason
/// but `progressive-replaced-failed` (a failed trial cannot drain with the spec that failed).
///
/// Every reason drains. Fail closed where the reference deletes at once: `purge` (an older
/// duplicate may hold data like any other), `delete-recreate` (the ISB service's pause request
/// normally leaves the pipeline Paused and drained already, so this drain ends at once; one that
/// is not drained is drained, its ISB service held until it is gone), and a missing, empty or
/// unknown reason (written by another version, or by hand).
pub fn tries_original_first(reason: Option<&str>) -> bool {
    reason != Some(upgrade_state_reason::PROGRESSIVE_REPLACED_FAILED)
}

/// Whether two pipeline specs are the same definition: equal but for what a scale-down or a
/// pause changes (vertex scales, the desired phase), as a paused, scaled-down promoted spec is
/// still the rollout's.
pub fn same_definition(a: &Value, b: &Value) -> bool {
    fn definition(spec: &Value) -> Value {
        let mut s = spec.clone();
        if let Some(vs) = s.get_mut("vertices").and_then(Value::as_array_mut) {
            for v in vs.iter_mut().filter_map(Value::as_object_mut) {
                v.remove("scale");
            }
        }
        if let Some(l) = s.get_mut("lifecycle").and_then(Value::as_object_mut) {
            l.remove("desiredPhase");
        }
        s
    }
    crate::usde::json_eq(&definition(a), &definition(b))
}

/// Whether a pipeline spec lets data in: desired phase Running (the default) and some
/// source vertex without an explicit `scale.max: 0`. No source at all counts as scaled to zero.
pub fn can_ingest(spec: &Value) -> bool {
    let view = SpecView(spec);
    let running = matches!(view.desired_phase(), "" | "Running");
    running
        && view
            .vertices()
            .iter()
            .any(|v| v.is_source && v.scale.max != Some(0))
}

/// The comma-terminated name lists of the force-drain annotations (`a,b,`).
pub fn names_in(list: Option<&str>) -> Vec<&str> {
    list.unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect()
}

/// `list` with `name` appended (`dedup`: unless already there), in the annotation's format.
pub fn appended(list: Option<&str>, name: &str, dedup: bool) -> String {
    let mut names: Vec<&str> = names_in(list);
    if !(dedup && names.contains(&name)) {
        names.push(name);
    }
    names.iter().map(|n| format!("{n},")).collect()
}

/// Configuration the step reads (`pipeline.*` of the controller config).
#[derive(Debug, Clone, Copy)]
pub struct RecycleConfig {
    pub max_recyclable: Duration,
    pub force_drain_failure_wait: Duration,
    pub keep_undrained: bool,
    /// `strategy.recycleStrategy.scaleFactor` of the rollout, else `pipeline.recycleScaleFactor`.
    pub scale_factor: i32,
}

/// The promoted pipeline a failed or undrainable pipeline may borrow its spec from.
#[derive(Debug, Clone, Copy)]
pub struct Promoted<'a> {
    pub name: &'a str,
    pub spec: &'a Value,
    /// Its spec matches the rollout's current definition (ignoring scale).
    pub matches_rollout: bool,
}

#[derive(Debug, Clone, Copy)]
pub struct RecycleInput<'a> {
    /// The recyclable pipeline, whole (`metadata`, `spec`, `status`).
    pub pipeline: &'a Value,
    /// The rollout is annotated `allow-data-loss: "true"`: a pipeline retired by an ISB service
    /// recreate (`delete-recreate`) is then deleted without draining, as pause-and-drain would.
    pub allow_data_loss: bool,
    /// The rollout's pipeline spec, templated for this pipeline.
    pub rollout_spec: &'a Value,
    /// `spec.strategy.progressive.forcePromote` of the rollout.
    pub force_promote: bool,
    /// Pod counts per vertex of the last promoted pipeline before its scale-down.
    pub historical_pod_count: &'a BTreeMap<String, i64>,
    pub promoted: Option<Promoted<'a>>,
    /// The pipeline's Vertex objects, once [`Step::ObserveVertices`] asked for them.
    pub vertices: Option<&'a [Value]>,
    pub config: RecycleConfig,
    pub now: Timestamp,
}

/// What to do with the recyclable pipeline this pass.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Delete it, reporting the outcome.
    Delete(DrainResult),
    /// Expired but kept (`keepUndrainedPipelines`): label `recyclable-expired`, every vertex at
    /// `min=max=0`; reported as `DrainIncomplete`.
    KeepExpired,
    /// Every vertex to `min=max=0`, then wait (no data can or should flow).
    ScaleToZero(String),
    /// Set these vertex scales (`min=max`, not disabled) before pausing.
    Scale(Vec<(String, i64)>),
    /// Pause with this grace period (`desiredPhase: Paused`).
    Pause { grace_seconds: i64 },
    /// Record `drain-failure-start-time` = now: the pipeline is Failed while draining.
    MarkFailureStart,
    /// Record `recyclable-start-time` = now: it is missing, so expiry is counted from now (the
    /// reference took a missing start as expired and deleted the pipeline undrained).
    StampStartTime,
    /// Merge-patch `spec` over the pipeline, add `promoted` to `force-drain-specs-started`,
    /// clear `drain-failure-start-time`, set `force-drain-spec-time` to now.
    ForceDrain { promoted: String, spec: Value },
    /// Add `promoted` to `force-drain-specs-completed` (`dedup` as the reference); delete with
    /// `ForceDrain` when `drained`.
    ForceDrainDone {
        promoted: String,
        drained: bool,
        dedup: bool,
    },
    /// Step again with [`RecycleInput::vertices`]: the decision needs the vertices' readiness.
    ObserveVertices,
    /// Nothing to do until something changes or `until` passes.
    Wait {
        why: String,
        until: Option<Timestamp>,
    },
}

fn parse_time(s: &str) -> Option<Timestamp> {
    s.parse::<Timestamp>().ok()
}

/// `t + d`, saturating.
pub fn plus(t: Timestamp, d: Duration) -> Timestamp {
    jiff::SignedDuration::try_from(d)
        .ok()
        .and_then(|d| t.checked_add(d).ok())
        .unwrap_or(Timestamp::MAX)
}

/// The per-vertex scales of a drain: sources 0; others `ceil(historical × f%)` (at least
/// 1), else the rollout's `scale.min`, else the pipeline's own `scale.min` (1 when unset).
pub fn drain_scales(
    pipeline_spec: &Value,
    rollout_spec: &Value,
    historical: &BTreeMap<String, i64>,
    factor: i32,
) -> Vec<(String, i64)> {
    let rollout_vertices = SpecView(rollout_spec).vertices();
    let factor = i64::from(factor.clamp(1, 100));
    SpecView(pipeline_spec)
        .vertices()
        .iter()
        .map(|v| {
            let n = if v.is_source {
                0
            } else if let Some(count) = historical.get(v.name) {
                ((count * factor + 99) / 100).max(1)
            } else if let Some(rv) = rollout_vertices.iter().find(|r| r.name == v.name) {
                rv.scale.min.unwrap_or(1)
            } else {
                v.scale.min.unwrap_or(1)
            };
            (v.name.to_string(), n)
        })
        .collect()
}

/// `pauseGracePeriodSeconds` while draining: the rollout's (default 30) stretched by 100/f.
pub fn drain_grace_seconds(rollout_spec: &Value, factor: i32) -> i64 {
    let p = rollout_spec
        .pointer("/lifecycle/pauseGracePeriodSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(30);
    let f = i64::from(factor.clamp(1, 100));
    (p * 100 + f - 1) / f
}

/// Whether each vertex already has `min == max == n` as wanted.
fn scaled_as(spec: &Value, want: &[(String, i64)]) -> bool {
    let vertices = SpecView(spec).vertices();
    want.iter().all(|(name, n)| {
        vertices.iter().find(|v| v.name == name).is_some_and(|v| {
            v.scale.min == Some(*n) && v.scale.max == Some(*n) && !v.scale.disabled
        })
    })
}

/// Every vertex at zero.
pub fn zero_scales(spec: &Value) -> Vec<(String, i64)> {
    SpecView(spec)
        .vertices()
        .iter()
        .map(|v| (v.name.to_string(), 0))
        .collect()
}

/// The promoted spec a pipeline is force-drained with: sources at 0, this pipeline's own
/// ISB service, running.
pub fn forced_spec(promoted_spec: &Value, own_isbsvc: Option<&str>) -> Value {
    let mut spec = promoted_spec.clone();
    if let Some(vs) = spec.get_mut("vertices").and_then(Value::as_array_mut) {
        for v in vs {
            if v.get("source").is_some_and(|s| !s.is_null()) {
                v["scale"] = json!({"min": 0, "max": 0, "disabled": false});
            }
        }
    }
    if let Some(m) = spec.as_object_mut() {
        match own_isbsvc {
            Some(isb) => {
                m.insert("interStepBufferServiceName".into(), isb.into());
            }
            None => {
                m.remove("interStepBufferServiceName");
            }
        }
    }
    if !spec.get("lifecycle").is_some_and(Value::is_object) {
        spec["lifecycle"] = json!({});
    }
    spec["lifecycle"]["desiredPhase"] = "Running".into();
    spec
}

/// What the drain of the pipeline as it is now needs next, or how it ended.
enum Drain {
    Step(Step),
    Paused { drained: bool },
    Failed,
}

fn drain(p: &ChildView<'_>, input: &RecycleInput<'_>) -> Drain {
    let spec = p.spec();
    if !spec.wants_paused() {
        let want = drain_scales(
            spec.0,
            input.rollout_spec,
            input.historical_pod_count,
            input.config.scale_factor,
        );
        if !scaled_as(spec.0, &want) {
            return Drain::Step(Step::Scale(want));
        }
        if p.generation_pending() {
            return Drain::Step(Step::Wait {
                why: format!(
                    "waiting for Numaflow to scale pipeline {} down for draining",
                    p.name()
                ),
                until: None,
            });
        }
        return Drain::Step(Step::Pause {
            grace_seconds: drain_grace_seconds(input.rollout_spec, input.config.scale_factor),
        });
    }
    match p.phase() {
        "Paused" => Drain::Paused {
            drained: p.drained_on_pause(),
        },
        "Failed" => Drain::Failed,
        phase => Drain::Step(Step::Wait {
            why: format!("draining pipeline {} (phase {phase})", p.name()),
            until: None,
        }),
    }
}

/// One pass of recycling for a pipeline labelled `recyclable`.
pub fn step(input: &RecycleInput<'_>) -> Step {
    let p = ChildView(input.pipeline);
    let reason = p.label(numaplane_api::keys::labels::UPGRADE_STATE_REASON);
    let try_original = tries_original_first(reason);
    // In order: the allowances first, then whether there is anything to drain, then expiry.
    if p.annotation(annotations::MARKED_FOR_DELETION) == Some("true") || input.force_promote {
        return Step::Delete(DrainResult::DrainNotRequired);
    }
    if input.allow_data_loss && reason == Some(upgrade_state_reason::DELETE_RECREATE) {
        return Step::Delete(DrainResult::DrainNotRequired);
    }
    if p.annotation(annotations::REQUIRES_DRAIN) != Some("true") {
        return Step::Delete(DrainResult::DrainNotRequired);
    }
    // Unreadable never deletes anything; missing is stamped now, never taken as expired.
    let expires_at = match p.annotation(annotations::RECYCLABLE_START_TIME) {
        None => return Step::StampStartTime,
        Some(raw) => match parse_time(raw) {
            Some(t) => plus(t, input.config.max_recyclable),
            None => {
                return Step::Wait {
                    why: format!(
                        "annotation {} is not an RFC 3339 time: {raw:?}",
                        annotations::RECYCLABLE_START_TIME
                    ),
                    until: None,
                };
            }
        },
    };
    if input.now >= expires_at {
        return if input.config.keep_undrained {
            Step::KeepExpired
        } else {
            Step::Delete(DrainResult::DrainIncomplete)
        };
    }
    let with_expiry = |s: Step| match s {
        Step::Wait { why, until } => Step::Wait {
            why,
            until: Some(until.map_or(expires_at, |u| u.min(expires_at))),
        },
        other => other,
    };
    // the rollout itself wants no data flowing. Better than the reference (its issues
    // #943, #878): a pipeline that is already Paused and drained holds nothing, so it need not
    // wait, scaled to zero, until the rollout resumes.
    if !can_ingest(input.rollout_spec) {
        if p.spec().wants_paused() && p.phase() == "Paused" && p.drained_on_pause() {
            return Step::Delete(DrainResult::StandardDrain);
        }
        return if scaled_as(p.spec().0, &zero_scales(p.spec().0)) {
            with_expiry(Step::Wait {
                why: "the rollout lets no data in: waiting with the pipeline scaled to zero".into(),
                until: None,
            })
        } else {
            Step::ScaleToZero("the rollout lets no data in".into())
        };
    }
    let started = p.annotation(annotations::FORCE_DRAIN_SPECS_STARTED);
    let failure_since = p
        .annotation(annotations::DRAIN_FAILURE_START_TIME)
        .and_then(parse_time);
    let failed_long_enough = |s: Option<Timestamp>| {
        s.is_some_and(|s| input.now >= plus(s, input.config.force_drain_failure_wait))
    };
    // drain with its own spec first. Better than the reference: a discontinued trial that
    // is not running healthy (the user reverted before it ever worked) cannot drain by itself,
    // since what keeps it from running also holds its data, so it goes straight to force drain
    // like a failed trial instead of first waiting out its own pause grace period. A pause it
    // already began is seen through.
    let own_spec_hopeless = reason == Some(upgrade_state_reason::DISCONTINUE_PROGRESSIVE)
        && !p.spec().wants_paused()
        && !crate::health::pipeline_health(input.pipeline).is_healthy();
    if try_original && !own_spec_hopeless && names_in(started).is_empty() {
        match drain(&p, input) {
            Drain::Step(s) => return with_expiry(s),
            Drain::Paused { drained: true } => return Step::Delete(DrainResult::StandardDrain),
            Drain::Paused { drained: false } => {}
            Drain::Failed if failure_since.is_none() => return Step::MarkFailureStart,
            Drain::Failed if !failed_long_enough(failure_since) => {
                return with_expiry(Step::Wait {
                    why: format!("pipeline {} failed while draining", p.name()),
                    until: failure_since.map(|s| plus(s, input.config.force_drain_failure_wait)),
                });
            }
            Drain::Failed => {}
        }
    }
    // force drain with the current promoted spec.
    let completed = p.annotation(annotations::FORCE_DRAIN_SPECS_COMPLETED);
    // A force drain that drained but was not deleted (the deletion met a newer resourceVersion:
    // Numaflow wrote in between) is still Paused and drained: delete it now. The reference
    // would find its promoted spec tried and keep it scaled to zero until it expired.
    if !names_in(completed).is_empty()
        && p.spec().wants_paused()
        && p.phase() == "Paused"
        && p.drained_on_pause()
    {
        return Step::Delete(DrainResult::ForceDrain);
    }
    let usable = input
        .promoted
        .filter(|pr| pr.matches_rollout && !names_in(completed).contains(&pr.name));
    let Some(promoted) = usable else {
        let why = "no healthy promoted spec to force-drain with yet: waiting scaled to zero";
        return if scaled_as(p.spec().0, &zero_scales(p.spec().0)) {
            with_expiry(Step::Wait {
                why: why.into(),
                until: None,
            })
        } else {
            Step::ScaleToZero(why.into())
        };
    };
    if !names_in(started).contains(&promoted.name) {
        return Step::ForceDrain {
            promoted: promoted.name.to_string(),
            spec: forced_spec(promoted.spec, p.spec().isbsvc_name()),
        };
    }
    let spec = p.spec();
    if !spec.wants_paused() && p.phase() == "Paused" {
        return with_expiry(Step::Wait {
            why: format!(
                "waiting for pipeline {} to run with the promoted spec",
                p.name()
            ),
            until: None,
        });
    }
    if p.generation_pending() {
        return with_expiry(Step::Wait {
            why: format!(
                "waiting for Numaflow to apply the promoted spec to {}",
                p.name()
            ),
            until: None,
        });
    }
    // Better than the reference, which pauses as soon as the spec is observed: a pause started
    // while Numaflow still replaces the vertices that held the data cannot drain them, and that
    // promoted spec would then count as tried. Pause once the pipeline runs healthy with it, or
    // once `forceDrainFailureWaitDuration` has passed since the spec was applied (a promoted
    // spec that never runs healthy here is still tried, as in the reference).
    // "Healthy" as for a trial: Running, every condition True, every vertex's replicas ready
    // (Numaflow's conditions alone turn True before the new vertex pods are ready).
    let applied_at = p
        .annotation(annotations::FORCE_DRAIN_SPEC_TIME)
        .and_then(parse_time);
    // A Failed phase waits too: Numaflow reports Failed for a pass right after the spec change
    // (a stale Vertex update), and pausing then skips the wait this gate exists for.
    if let Some(at) = applied_at
        && !spec.wants_paused()
    {
        let until = plus(at, input.config.force_drain_failure_wait);
        if input.now < until {
            let Some(vertices) = input.vertices else {
                return Step::ObserveVertices;
            };
            let health =
                crate::progressive::health::pipeline_type_health(input.pipeline, false, vertices);
            if health != crate::progressive::TrialHealth::Healthy {
                return with_expiry(Step::Wait {
                    why: format!(
                        "waiting for pipeline {} to run healthy with the promoted spec before \
                         pausing it",
                        p.name()
                    ),
                    until: Some(until),
                });
            }
        }
    }
    match drain(&p, input) {
        Drain::Step(s) => with_expiry(s),
        Drain::Paused { drained } => Step::ForceDrainDone {
            promoted: promoted.name.to_string(),
            drained,
            dedup: true,
        },
        Drain::Failed if failure_since.is_none() => Step::MarkFailureStart,
        Drain::Failed if failed_long_enough(failure_since) => Step::ForceDrainDone {
            promoted: promoted.name.to_string(),
            drained: false,
            dedup: false,
        },
        Drain::Failed => with_expiry(Step::Wait {
            why: format!("pipeline {} failed while force-draining", p.name()),
            until: failure_since.map(|s| plus(s, input.config.force_drain_failure_wait)),
        }),
    }
}

#[cfg(test)]
mod tests;
