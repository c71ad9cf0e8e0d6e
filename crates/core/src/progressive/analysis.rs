//! Judging the Argo Rollouts AnalysisRun that follows a successful basic assessment
//! (docs/strategies.md).
//!
//! Deliberate change from the reference (docs/compatibility.md): an AnalysisRun that ends `Error` or
//! `Inconclusive`, or is still running after `progressive.analysisRunTimeout`, **fails** the
//! trial instead of promoting it. Promoting a child whose analysis could not reach a verdict
//! defeats the analysis; Argo Rollouts itself aborts on Error and waits for a human on
//! Inconclusive. The user can still promote such a trial with the `force-promote` label.

use super::time::{Secs, secs_of, time_at};
use numaplane_api::Kind;
use numaplane_api::progressive::{AnalysisPhase, AnalysisStatus};
use std::time::Duration;

/// The AnalysisRun as observed in the cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct ObservedRun {
    pub phase: AnalysisPhase,
    /// `status.completedAt`, if any.
    pub completed_at: Option<k8s_openapi::jiff::Timestamp>,
}

/// `<lowercase child kind>-<trial>`: `monovertex-my-mvr-1`, `pipeline-my-pl-3`.
pub fn analysis_run_name(kind: Kind, trial: &str) -> String {
    format!("{}-{trial}", kind.child_kind().to_ascii_lowercase())
}

/// The analysis part of a verdict.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum AnalysisVerdict {
    Success,
    Failure(String),
    /// Create the AnalysisRun with this name (its start is already recorded).
    Create(String),
    /// Running; give up at this time.
    Running {
        timeout_at: Secs,
    },
}

/// Records what was observed into `status` and judges it. `status` is created (name and start
/// recorded) when absent, so the creation is recorded before it happens.
pub(crate) fn judge(
    status: &mut Option<AnalysisStatus>,
    run_name: String,
    observed: Option<&ObservedRun>,
    timeout: Duration,
    now: Secs,
) -> AnalysisVerdict {
    let st = status.get_or_insert_with(AnalysisStatus::default);
    if st.analysis_run_name != run_name {
        *st = AnalysisStatus {
            analysis_run_name: run_name.clone(),
            start_time: Some(time_at(now)),
            ..AnalysisStatus::default()
        };
    }
    // A lost status write can leave a run without a start: count from now (the reference
    // dereferences nil here).
    let start = match &st.start_time {
        Some(t) => secs_of(t),
        None => {
            st.start_time = Some(time_at(now));
            now
        }
    };
    let Some(run) = observed else {
        return AnalysisVerdict::Create(run_name);
    };
    st.phase = run.phase;
    if st.end_time.is_none() {
        st.end_time = run
            .completed_at
            .map(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time);
    }
    let timeout_at = start.saturating_add(i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX));
    match run.phase {
        AnalysisPhase::Successful => AnalysisVerdict::Success,
        AnalysisPhase::Failed => AnalysisVerdict::Failure(format!("AnalysisRun {run_name} Failed")),
        AnalysisPhase::Error | AnalysisPhase::Inconclusive => AnalysisVerdict::Failure(format!(
            "AnalysisRun {run_name} ended {:?} without a verdict",
            run.phase
        )),
        AnalysisPhase::Unset | AnalysisPhase::Pending | AnalysisPhase::Running => {
            if now >= timeout_at {
                AnalysisVerdict::Failure(format!(
                    "AnalysisRun {run_name} did not complete within {}s",
                    timeout.as_secs()
                ))
            } else {
                AnalysisVerdict::Running { timeout_at }
            }
        }
    }
}
