//! A provider outage during a real analysis: Prometheus goes away while the real Argo Rollouts
//! controller evaluates the shipped AnalysisTemplate, its measurements error, the run ends
//! `Error`, and Numaplane fails the trial (it never promotes on an analysis that could not
//! look), keeping the promoted pipeline. Its own test binary: the outage would break the other
//! analyses of a shared stack.

mod support;

use numaplane_api::PipelineRollout;
use numaplane_api::numaflow::{AnalysisRun, Pipeline};
use support::analysis::*;
use support::condition;

#[tokio::test]
async fn an_analysis_whose_prometheus_is_gone_fails_the_trial() {
    let h = setup("real-ar-outage").await;
    let pid = h
        .env
        .pid_of("prometheus")
        .expect("the real stack runs Prometheus");
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(killed.success(), "stopping Prometheus");
    h.apply::<PipelineRollout>(pr(CAT2)).await;
    let reasons = h
        .until::<PipelineRollout, _, _>("trial failed", "pr", |r| {
            let st = r?.status.as_ref()?;
            let (s, reason, _) = condition(&st.status.conditions, "ProgressiveUpgradeSucceeded")?;
            let up = st
                .progressive_status
                .as_ref()?
                .upgrading_pipeline_status
                .as_ref()?;
            (s == "False" && reason == "Failed").then(|| up.child.failure_reasons.clone())
        })
        .await;
    let run: AnalysisRun = h.api().get("pipeline-pr-1").await.expect("AnalysisRun");
    assert_eq!(run_phase(&run), "Error", "{:?}", run.status);
    assert!(
        measurements(&run).iter().any(|(_, _, p)| p == "Error"),
        "Argo recorded the provider errors: {:?}",
        measurements(&run)
    );
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("pipeline-pr-1") && r.contains("Error")),
        "the failure names the run and how it ended: {reasons:?}"
    );
    let pr0: Pipeline = h.api().get("pr-0").await.expect("pr-0");
    assert_eq!(
        kube::ResourceExt::labels(&pr0)
            .get("numaplane.numaproj.io/upgrade-state")
            .map(String::as_str),
        Some("promoted")
    );
    h.assert_invariants().await;
}
