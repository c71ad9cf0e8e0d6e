//! What a pass observes into the status besides the engine's records: the rollout's phase and
//! message, its promoted child's health and fields, the upgrade history. The report computes it
//! once a pass has acted; a progressive step that records its state before acting computes the
//! same from the plan, so that one write carries both (`preview`).

use super::kind::Rollout;
use crate::children::ChildObject;
use crate::context::Ctx;
use crate::status::{self, RolloutStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use numaplane_api::common::UpgradeStrategy;
use numaplane_api::keys;

/// What a pass did to the promoted child, for the upgrade history.
#[derive(Default)]
pub(crate) struct Trace {
    pub promoted: String,
    pub created: bool,
    /// Updated in place (not by a strategy step).
    pub applied: bool,
    /// Where the promoted child differed from the rollout.
    pub changed_fields: Vec<String>,
}

/// The status a pass that leaves the promoted child `child` as it is, waiting for `pending`,
/// will report (`report_child`, the observed generation and the history), before it acts: a
/// record written before the step it records then carries the observation the pass would make
/// after, instead of a second write moments later.
pub(super) fn preview<R: Rollout>(
    ctx: &Ctx,
    st: &R::Status,
    child: &R::Child,
    pending: &str,
    strategy_before: UpgradeStrategy,
    trace: &Trace,
    at: (i64, &Time),
) -> R::Status {
    let (generation, now) = at;
    let mut shown = st.clone();
    report_child::<R>(ctx, &mut shown, child, Some(pending), generation, now);
    shown.common_mut().observed_generation = generation;
    record_history::<R>(ctx, &mut shown, strategy_before, trace, generation, now);
    shown
}

/// Adds this pass to `status.upgradeHistory` (see [`numaplane_core::history`]).
pub(super) fn record_history<R: Rollout>(
    ctx: &Ctx,
    st: &mut R::Status,
    strategy_before: UpgradeStrategy,
    trace: &Trace,
    generation: i64,
    now: &Time,
) {
    let record = R::read_record(st);
    let obs = numaplane_core::history::Observation {
        strategy_before,
        strategy_after: st.common().upgrade_in_progress,
        trial: record.upgrading.as_ref(),
        promoted: Some(&trace.promoted),
        created: trace.created,
        applied: trace.applied,
        generation,
        changed_fields: &trace.changed_fields,
    };
    let limit = ctx.settings.controller().upgrade_history_limit;
    numaplane_core::history::record(&mut st.common_mut().upgrade_history, &obs, now, limit);
}

/// The child's part of the status: deployed or pending, its health and kind-specific fields.
/// Returns whether its reaction is still to come (Numaflow has yet to observe it, or it, or
/// something it needs like a pipeline's ISB service, is still coming up).
pub(super) fn report_child<R: Rollout>(
    ctx: &Ctx,
    st: &mut R::Status,
    child: &R::Child,
    pending: Option<&str>,
    generation: i64,
    now: &Time,
) -> bool {
    match pending {
        Some(m) => status::mark_pending(st.common_mut(), m),
        None => status::mark_deployed(st.common_mut(), generation, now),
    }
    let health = R::health(ctx, child);
    status::set_health(st.common_mut(), &health, generation, now);
    R::observe_child(st, child, generation, now);
    health.reason == keys::reason::PROGRESSING
        || not_yet_observed(child)
        || R::still_coming_up(ctx, child)
}

/// Whether the child's controller has yet to observe its current generation (a new MonoVertex
/// reads as "Unknown" rather than "Progressing" until Numaflow first writes its status).
fn not_yet_observed<C: ChildObject>(child: &C) -> bool {
    let observed = child
        .status()
        .and_then(|s| s.get("observedGeneration"))
        .and_then(serde_json::Value::as_i64)
        .unwrap_or(0);
    observed < child.meta().generation.unwrap_or(0)
}
