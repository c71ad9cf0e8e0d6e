//! Numaflow's real data plane on the real node, every message counted through an upgrade
//! (docs/dataplane.md): real vertex pods running `numaflow-rs`, the real pipeline daemon, a real
//! JetStream ISB service, the counting source and sink. What `make test` runs: one
//! pause-and-drain of a pipeline and one progressive upgrade; `make dataplane` runs the rest.

mod support;

use std::time::{Duration, Instant};

use numaplane_api::ISBServiceRollout;
use numaplane_api::PipelineRollout;
use numaplane_api::numaflow::Pipeline;
use serde_json::{Value, json};
use support::Harness;
use support::dataplane::{CountDir, counting_pipeline, report};
use support::fixtures::{paused_drained_at, phase, record};
use support::scenario::{ISB, isb, settled};

/// Real pods pull images, NATS forms a cluster, the daemon starts: minutes, not seconds.
const START: Duration = Duration::from_secs(300);
const UPGRADE: Duration = Duration::from_secs(300);
/// Messages delivered before an upgrade starts and after it ends: the pipeline really flows.
const FLOWING: usize = 60;

fn pr(spec: Value) -> Value {
    json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "PipelineRollout",
        "metadata": {"name": "pr"},
        "spec": {"pipeline": {"spec": spec}}
    })
}

fn sink_generation(p: &Pipeline) -> Option<&str> {
    p.spec
        .pointer("/vertices/2/containerTemplate/env/0/value")
        .and_then(Value::as_str)
}

/// A data-loss change (the sink vertex's `containerTemplate.env`) under pause-and-drain: the
/// pipeline is paused, drained by Numaflow itself, updated and resumed; no message is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_and_drain_of_a_pipeline_loses_no_message() {
    let started = Instant::now();
    let h = Harness::start_dataplane("dp-ppnd", "defaultUpgradeStrategy: pause-and-drain\n").await;
    let count = CountDir::new();
    h.apply::<ISBServiceRollout>(isb("2.10.3", "1Gi", None))
        .await;
    h.apply::<PipelineRollout>(pr(counting_pipeline(count.path(), ISB, 1)))
        .await;
    h.until_within(START, "pr deployed", "pr", settled::<PipelineRollout>)
        .await;
    let before = count
        .flowing(0, FLOWING, START, "messages through the first pipeline")
        .await;

    let seen = record::<Pipeline>(&h, "pr-0").await;
    h.apply::<PipelineRollout>(pr(counting_pipeline(count.path(), ISB, 2)))
        .await;
    h.until_within::<Pipeline, _, _>(UPGRADE, "updated and running", "pr-0", |p| {
        let p = p?;
        (sink_generation(p) == Some("2") && phase(p) == "Running").then_some(())
    })
    .await;
    h.until_within(UPGRADE, "pr settled", "pr", settled::<PipelineRollout>)
        .await;
    assert!(
        paused_drained_at(&seen).is_some(),
        "Numaflow reported the pipeline paused and drained before the update"
    );
    count
        .flowing(before, FLOWING, UPGRADE, "messages after the upgrade")
        .await;

    let tally = count.finish(Duration::from_secs(60)).await;
    report(
        "pause-and-drain: pipeline, data-loss change",
        "cargo test -p numaplane --test dataplane pause_and_drain_of_a_pipeline",
        &tally,
        started.elapsed(),
    );
    assert!(tally.produced > 2 * FLOWING, "{tally:?}");
    assert_eq!(tally.lost, 0, "no message lost: {tally:?}");
    h.assert_invariants().await;
}
