//! `status.upgradeHistory`: the last upgrade attempts of a rollout, kept in its status so they
//! survive restarts. Derived once per pass from what the pass did and from how the status moved
//! (the strategy in progress, the trial's recorded assessment), so no strategy writes it itself.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use numaplane_api::common::{UpgradeOutcome, UpgradeRecord, UpgradeStrategy};
use numaplane_api::progressive::{AssessmentResult, ForcedSuccessReason, UpgradingChildStatus};
use serde_json::Value;

/// Changed fields listed per attempt; more are summarised as "… and N more".
pub const MAX_CHANGED_FIELDS: usize = 10;
/// Reasons kept per attempt, and the length each is cut to (a status is bounded in size).
const MAX_REASONS: usize = 5;
const MAX_REASON_CHARS: usize = 512;
/// Length a changed field's path is cut to (a key may be long).
const MAX_FIELD_CHARS: usize = 256;

/// What one pass left, as far as the history is concerned.
#[derive(Debug, Clone, Default)]
pub struct Observation<'a> {
    /// `upgradeInProgress` when the pass started (an apply in a pass that ends a strategy is
    /// that strategy's).
    pub strategy_before: UpgradeStrategy,
    /// `upgradeInProgress` after it.
    pub strategy_after: UpgradeStrategy,
    /// The trial's recorded status after the pass.
    pub trial: Option<&'a UpgradingChildStatus>,
    /// The promoted child after the pass.
    pub promoted: Option<&'a str>,
    /// The pass created the promoted child.
    pub created: bool,
    /// The pass changed the promoted child in place.
    pub applied: bool,
    pub generation: i64,
    /// Fields in which the promoted child differed from the rollout ([`changed_fields`]).
    pub changed_fields: &'a [String],
}

/// Adds to or closes attempts in `history` for what `obs` shows; keeps the newest `limit`.
/// Idempotent (the same observation again changes nothing), and read from the state the status
/// is in rather than from transitions, so a pass whose outcome was not recorded (a failed pass)
/// leaves nothing open for good.
pub fn record(history: &mut Vec<UpgradeRecord>, obs: &Observation<'_>, now: &Time, limit: usize) {
    use UpgradeStrategy::{PipelinePauseAndDrain as Ppnd, Progressive};
    let after = obs.strategy_after;
    if obs.created
        && let Some(child) = obs.promoted
    {
        match history.last_mut() {
            // A pause-and-drain survives a recreate: the new child is part of that attempt.
            Some(r) if r.outcome.is_none() && r.strategy == Ppnd && after == Ppnd => {
                if r.child != child {
                    r.previous_child = std::mem::replace(&mut r.child, child.to_string());
                }
            }
            _ => {
                close_open(history, UpgradeOutcome::Discontinued, now);
                let mut r = start(obs, child, UpgradeStrategy::DirectApply, now);
                finish(&mut r, UpgradeOutcome::Created, now);
                history.push(r);
            }
        }
    }
    if let Some(t) = obs.trial.filter(|t| !t.name.is_empty()) {
        progressive(history, obs, t, now);
    }
    if after == Ppnd && open(history).is_none_or(|r| r.strategy != Ppnd) {
        close_open(history, UpgradeOutcome::Discontinued, now);
        history.push(start(obs, obs.promoted.unwrap_or_default(), Ppnd, now));
    }
    if after != Ppnd {
        close_open_of(history, Ppnd, UpgradeOutcome::PausedAndDrained, now);
    }
    if after != Progressive {
        close_open_of(history, Progressive, UpgradeOutcome::Discontinued, now);
    }
    // Only a change the user made: the applies that end a strategy (the promoted child's own
    // scale back, the resumed pipeline) are part of that strategy's attempt, and a drift put
    // right in a generation already recorded is no new attempt (while one whose first pass
    // failed is still recorded when it succeeds).
    if obs.applied
        && !obs.created
        && obs.strategy_before == UpgradeStrategy::NoOp
        && after == UpgradeStrategy::NoOp
        && !history.iter().any(|r| r.generation == obs.generation)
        && let Some(child) = obs.promoted
    {
        let mut r = start(obs, child, UpgradeStrategy::DirectApply, now);
        finish(&mut r, UpgradeOutcome::AppliedDirectly, now);
        history.push(r);
    }
    let excess = history.len().saturating_sub(limit);
    history.drain(..excess);
}

/// The attempt in progress: only ever the newest.
/// The attempts `after` shows finished that `before` did not (open there, or not there yet),
/// with how long each took in seconds; the `Created` entry of a first child is no upgrade and is
/// left out. An attempt is known by its child, strategy and start time.
pub fn finished_since<'a>(
    before: &[UpgradeRecord],
    after: &'a [UpgradeRecord],
) -> Vec<(&'a UpgradeRecord, f64)> {
    let same = |a: &UpgradeRecord, b: &UpgradeRecord| {
        a.child == b.child && a.strategy == b.strategy && a.start_time == b.start_time
    };
    after
        .iter()
        .filter(|r| r.outcome.is_some_and(|o| o != UpgradeOutcome::Created))
        .filter(|r| !before.iter().any(|b| same(b, r) && b.outcome.is_some()))
        .map(|r| {
            let end = r.end_time.as_ref().map_or(r.start_time.0, |t| t.0);
            let secs = end.duration_since(r.start_time.0).as_secs_f64().max(0.0);
            (r, secs)
        })
        .collect()
}

fn open(history: &[UpgradeRecord]) -> Option<&UpgradeRecord> {
    history.last().filter(|r| r.outcome.is_none())
}

/// A trial's attempt: started when its name is first recorded, ended by its assessment.
fn progressive(
    history: &mut Vec<UpgradeRecord>,
    obs: &Observation<'_>,
    t: &UpgradingChildStatus,
    now: &Time,
) {
    let is_trial = |r: &UpgradeRecord| r.strategy == UpgradeStrategy::Progressive;
    let known = history
        .iter()
        .rposition(|r| is_trial(r) && r.child == t.name);
    let i = match known {
        Some(i) => i,
        // A recorded result of a trial no longer in the history (evicted) starts nothing.
        None if t.discontinued
            || !matches!(t.assessment_result, None | Some(AssessmentResult::Unknown)) =>
        {
            return;
        }
        None => {
            close_open(history, UpgradeOutcome::Replaced, now);
            let mut r = start(obs, &t.name, UpgradeStrategy::Progressive, now);
            r.previous_child = obs.promoted.unwrap_or_default().to_string();
            history.push(r);
            history.len() - 1
        }
    };
    let r = &mut history[i];
    match t.assessment_result {
        Some(AssessmentResult::Success) => {
            let (outcome, reasons) = promoted_outcome(t);
            // A failed trial can still be force-promoted: the later verdict wins.
            if r.outcome != Some(outcome) {
                r.reasons.extend(reasons);
                finish(r, outcome, now);
            }
        }
        Some(AssessmentResult::Failure) if r.outcome.is_none() => {
            r.reasons = t.failure_reasons.clone();
            finish(r, UpgradeOutcome::Failed, now);
        }
        _ if t.discontinued && r.outcome.is_none() => {
            // Back to the child it started from, or that child is gone.
            let outcome = if obs.promoted == Some(r.previous_child.as_str()) {
                UpgradeOutcome::RolledBack
            } else {
                UpgradeOutcome::Discontinued
            };
            finish(r, outcome, now);
        }
        _ => {}
    }
}

fn promoted_outcome(t: &UpgradingChildStatus) -> (UpgradeOutcome, Vec<String>) {
    if !t.forced_success {
        return (UpgradeOutcome::Promoted, Vec::new());
    }
    let why = match t.forced_success_reason {
        Some(ForcedSuccessReason::ForcePromote) => "force-promote label on the trial",
        Some(ForcedSuccessReason::RolloutConfiguration) => "strategy.progressive.forcePromote",
        Some(ForcedSuccessReason::ProgressiveUnsupported) => {
            "not assessable progressively (an HPA rider on a pipeline)"
        }
        Some(ForcedSuccessReason::NoDataIngestion) => "it can't ingest data: nothing to assess",
        None => "forced success",
    };
    (
        UpgradeOutcome::ForcePromoted,
        vec![format!("promoted without assessment: {why}")],
    )
}

fn start(
    obs: &Observation<'_>,
    child: &str,
    strategy: UpgradeStrategy,
    now: &Time,
) -> UpgradeRecord {
    UpgradeRecord {
        child: child.to_string(),
        previous_child: String::new(),
        strategy,
        generation: obs.generation,
        start_time: now.clone(),
        end_time: None,
        outcome: None,
        reasons: Vec::new(),
        changed_fields: bounded(obs.changed_fields),
    }
}

fn finish(r: &mut UpgradeRecord, outcome: UpgradeOutcome, now: &Time) {
    r.outcome = Some(outcome);
    r.end_time = Some(now.clone());
    r.reasons.truncate(MAX_REASONS);
    for reason in &mut r.reasons {
        cut(reason, MAX_REASON_CHARS);
    }
}

/// `s` cut to `max` characters and an ellipsis.
fn cut(s: &mut String, max: usize) {
    if let Some((at, _)) = s.char_indices().nth(max) {
        s.truncate(at);
        s.push('…');
    }
}

/// Ends the attempt in progress, whatever its strategy.
fn close_open(history: &mut [UpgradeRecord], outcome: UpgradeOutcome, now: &Time) {
    if let Some(r) = history.last_mut().filter(|r| r.outcome.is_none()) {
        finish(r, outcome, now);
    }
}

/// Ends the attempt in progress if it is one of `strategy`.
fn close_open_of(
    history: &mut [UpgradeRecord],
    strategy: UpgradeStrategy,
    outcome: UpgradeOutcome,
    now: &Time,
) {
    if let Some(r) = history
        .last_mut()
        .filter(|r| r.outcome.is_none() && r.strategy == strategy)
    {
        finish(r, outcome, now);
    }
}

/// The paths (under `prefix`, e.g. `spec.pipeline.spec`) at which `live` and `desired` differ,
/// sorted. Objects are compared key by key (a null is no field), arrays element by element; an
/// array of another length is one change.
pub fn changed_fields(prefix: &str, live: &Value, desired: &Value) -> Vec<String> {
    let mut out = Vec::new();
    diff(prefix, live, desired, &mut out);
    out
}

/// At most [`MAX_CHANGED_FIELDS`] entries, the last one then "… and N more".
/// Each path at most [`MAX_FIELD_CHARS`] long.
fn bounded(fields: &[String]) -> Vec<String> {
    let kept = if fields.len() <= MAX_CHANGED_FIELDS {
        fields.len()
    } else {
        MAX_CHANGED_FIELDS - 1
    };
    let mut out: Vec<String> = fields[..kept].to_vec();
    for f in &mut out {
        cut(f, MAX_FIELD_CHARS);
    }
    if kept < fields.len() {
        out.push(format!("… and {} more", fields.len() - kept));
    }
    out
}

fn diff(at: &str, live: &Value, desired: &Value, out: &mut Vec<String>) {
    match (live, desired) {
        (Value::Object(l), Value::Object(d)) => {
            let keys: std::collections::BTreeSet<&String> = l.keys().chain(d.keys()).collect();
            for k in keys {
                let (lv, dv) = (l.get(k), d.get(k));
                // An explicit null is the same as no field.
                let (lv, dv) = (lv.unwrap_or(&Value::Null), dv.unwrap_or(&Value::Null));
                diff(&join(at, k), lv, dv, out);
            }
        }
        (Value::Array(l), Value::Array(d)) if l.len() == d.len() => {
            for (i, (lv, dv)) in l.iter().zip(d).enumerate() {
                diff(&format!("{at}[{i}]"), lv, dv, out);
            }
        }
        // Numbers by value (`1` and `1.0` are one replica count), as the apply compares them.
        (l, d) if !crate::usde::json_eq(l, d) => out.push(at.to_string()),
        _ => {}
    }
}

/// `a.b`, or `a["odd.key"]` for a key that is no plain identifier.
fn join(at: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    match (at.is_empty(), plain) {
        (true, true) => key.to_string(),
        (false, true) => format!("{at}.{key}"),
        (_, false) => format!("{at}[{}]", Value::String(key.to_string())),
    }
}

#[cfg(test)]
mod tests;
