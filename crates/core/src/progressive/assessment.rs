//! The basic assessment over time (docs/strategies.md): from health samples and the
//! schedule `delay,end,period,interval` to Success, Failure, or "wait until …".
//!
//! Timing, as the reference: assessment starts `delay` after the first pass
//! (`basicAssessmentStartTime`, recorded), strictly after that time; the trial must then be
//! healthy for a continuous `period` (`trialWindowStartTime`, restarted by any failure signal)
//! and reach that before `start + end`, else it fails. Unlike the reference, which only samples
//! every `interval`, the returned wake-up is the earliest of the next sample, the end of the
//! healthy window and the failure deadline, so a verdict is never up to `interval` late. And
//! when every input of the sample wakes the rollout as it changes (`watched`: a MonoVertex, a
//! Pipeline whose own status does not pass it), there is no next sample: the child's watch
//! brings each change, and the wake-up is only the verdict's deadline. At N=10,000 a sample of
//! every trial every second kept the workers' queue from ever draining.

use super::health::TrialHealth;
use super::time::{Secs, secs, secs_of, time_at, timestamp_at};
use crate::config::AssessmentSchedule;
use numaplane_api::Kind;
use numaplane_api::progressive::{AssessmentResult, UpgradingChildStatus};

/// The basic part of a verdict.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum BasicVerdict {
    Success,
    Failure,
    Wait {
        wake_at: Secs,
        waiting_for: String,
        /// `wake_at` is when a verdict falls due (the healthy period or the window ends), not
        /// only the next sample.
        deadline: bool,
    },
}

/// Judges one sample, updating `u` as the reference records it. `u` must name the trial.
/// `watched`: a change of anything `health` was judged from wakes the rollout.
pub(crate) fn basic(
    u: &mut UpgradingChildStatus,
    kind: Kind,
    schedule: &AssessmentSchedule,
    health: &TrialHealth,
    watched: bool,
    now: Secs,
) -> BasicVerdict {
    let trial = u.name.clone();
    let start = match &u.basic_assessment_start_time {
        Some(t) => secs_of(t),
        None => {
            let s = now.saturating_add(secs(schedule.delay));
            u.basic_assessment_start_time = Some(time_at(s));
            s
        }
    };
    if now <= start {
        return BasicVerdict::Wait {
            wake_at: start + 1,
            waiting_for: format!(
                "trial {trial}: assessment starts after {}",
                timestamp_at(start)
            ),
            deadline: false,
        };
    }
    let next_sample = if watched && kind != Kind::IsbService {
        Secs::MAX
    } else {
        now.saturating_add(secs(schedule.requeue_interval()))
    };

    if kind == Kind::IsbService {
        // Judged from its pipelines only; End and Period don't apply (their own End bounds it).
        return match health {
            TrialHealth::Healthy => {
                u.basic_assessment_end_time = Some(time_at(now));
                u.failure_reasons.clear();
                u.child_status = None;
                BasicVerdict::Success
            }
            TrialHealth::Unhealthy {
                reasons,
                child_status,
            } => {
                u.basic_assessment_end_time = Some(time_at(now));
                u.failure_reasons = reasons.clone();
                u.child_status = child_status.clone();
                BasicVerdict::Failure
            }
            TrialHealth::Pending => BasicVerdict::Wait {
                wake_at: next_sample,
                waiting_for: format!(
                    "trial {trial}: waiting for every pipeline using it to finish its own progressive upgrade onto it"
                ),
                deadline: false,
            },
        };
    }

    match u.basic_assessment_result {
        Some(AssessmentResult::Success) => {
            u.child_status = None;
            u.failure_reasons.clear();
            return BasicVerdict::Success;
        }
        Some(AssessmentResult::Failure) => return BasicVerdict::Failure,
        Some(AssessmentResult::Unknown) | None => {}
    }

    let end = secs(schedule.end);
    if now - start > end {
        u.assessment_result = Some(AssessmentResult::Failure);
        u.basic_assessment_result = Some(AssessmentResult::Failure);
        u.basic_assessment_end_time = Some(time_at(now));
        return BasicVerdict::Failure;
    }
    // The first time `now - start > end` holds.
    let fail_at = start.saturating_add(end).saturating_add(1);
    let period = secs(schedule.period);
    let until = timestamp_at(fail_at - 1);
    match health {
        TrialHealth::Unhealthy {
            reasons,
            child_status,
        } => {
            u.trial_window_start_time = None;
            u.assessment_result = Some(AssessmentResult::Unknown);
            u.failure_reasons = reasons.clone();
            u.child_status = child_status.clone();
            BasicVerdict::Wait {
                wake_at: next_sample.min(fail_at),
                waiting_for: format!(
                    "trial {trial}: unhealthy ({}); must be healthy for {period}s by {until}",
                    reasons.join("; ")
                ),
                deadline: fail_at <= next_sample,
            }
        }
        TrialHealth::Pending => BasicVerdict::Wait {
            wake_at: next_sample.min(fail_at),
            waiting_for: format!(
                "trial {trial}: not running yet; must be healthy for {period}s by {until}"
            ),
            deadline: fail_at <= next_sample,
        },
        TrialHealth::Healthy => {
            let window = match &u.trial_window_start_time {
                Some(t) => secs_of(t),
                None => {
                    u.trial_window_start_time = Some(time_at(now));
                    now
                }
            };
            if now - window >= period {
                u.basic_assessment_end_time = Some(time_at(now));
                u.basic_assessment_result = Some(AssessmentResult::Success);
                u.child_status = None;
                u.failure_reasons.clear();
                BasicVerdict::Success
            } else {
                let due = (window + period).min(fail_at);
                BasicVerdict::Wait {
                    wake_at: next_sample.min(due),
                    deadline: due <= next_sample,
                    // Names times, not a count of seconds: the same on every sample of the
                    // window, so sampling does not rewrite the rollout's status.
                    waiting_for: format!(
                        "trial {trial}: healthy since {}, succeeds at {} if it stays healthy, must complete by {until}",
                        timestamp_at(window),
                        timestamp_at(window + period)
                    ),
                }
            }
        }
    }
}
