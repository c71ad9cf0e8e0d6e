//! Pause requests under pause-and-drain (CONTRIBUTING.md with `pause-and-drain`): an ISB
//! service version change pauses the pipelines using it first, updates the isbsvc, then resumes
//! them; a change outside the USDE lists never pauses; a Failed pipeline is not waited on; a
//! Numaflow controller version change pauses the namespace's pipelines first; a restart while
//! pipelines are paused resumes them only after the update, and pipelines created meanwhile
//! start paused; a recreate field deletes and recreates the ISB service and its pipelines
//! (drained first under pause-and-drain).

mod support;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::ListParams;
use numaplane_api::common::{Phase, UpgradeStrategy};
use numaplane_api::numaflow::{InterStepBufferService, Pipeline};
use numaplane_api::{ISBServiceRollout, NumaflowControllerRollout, PipelineRollout};
use serde_json::{Value, json};
use std::time::Duration;
use support::fixtures::{event_reasons, image, nc_rollout, paused_drained_at, phase, record, rv};
use support::{Harness, condition};

fn isb_rollout(jetstream: Value) -> Value {
    support::fixtures::isb_rollout("default", jetstream)
}

const PPND: &str = "defaultUpgradeStrategy: pause-and-drain\n";

fn pipeline_rollout(name: &str) -> Value {
    pipeline_rollout_with_grace(name, 30)
}

fn pipeline_rollout_with_grace(name: &str, grace_seconds: u64) -> Value {
    json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "PipelineRollout",
        "metadata": {"name": name},
        "spec": {"pipeline": {"spec": {
            "lifecycle": {"pauseGracePeriodSeconds": grace_seconds},
            "vertices": [
                {"name": "in", "scale": {"min": 1, "max": 1}, "source": {"generator": {"rpu": 5}}},
                {"name": "cat", "scale": {"min": 1, "max": 1},
                 "udf": {"container": {"image": "quay.io/numaio/numaflow-go/map-cat:stable"}}},
                {"name": "out", "scale": {"min": 1, "max": 1}, "sink": {"log": {}}}
            ],
            "edges": [{"from": "in", "to": "cat"}, {"from": "cat", "to": "out"}]
        }}}
    })
}

fn running_as_specified(p: Option<&Pipeline>) -> Option<()> {
    let p = p?;
    (phase(p) == "Running" && p.spec.pointer("/lifecycle/desiredPhase").is_none()).then_some(())
}

fn pr_settled(pr: Option<&PipelineRollout>) -> Option<()> {
    let st = pr?.status.as_ref()?;
    (st.status.phase == Phase::Deployed
        && st.status.upgrade_in_progress == UpgradeStrategy::NoOp
        && st.status.observed_generation == pr?.metadata.generation.unwrap_or(-1)
        && condition(&st.status.conditions, "ChildResourcesHealthy")?.0 == "True")
        .then_some(())
}

fn isbr_settled(r: Option<&ISBServiceRollout>) -> Option<ISBServiceRollout> {
    let r = r?;
    let st = r.status.as_ref()?;
    (st.status.phase == Phase::Deployed
        && st.status.upgrade_in_progress == UpgradeStrategy::NoOp
        && st.status.observed_generation == r.metadata.generation.unwrap_or(-1)
        && condition(&st.status.conditions, "ChildResourcesHealthy")?.0 == "True")
        .then(|| r.clone())
}

fn pausing(conds: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition]) -> Option<String> {
    condition(conds, "PausingPipelines").map(|c| c.0)
}

fn js_version(i: &InterStepBufferService) -> &str {
    i.spec["jetstream"]["version"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn isb_service_version_change_pauses_its_pipelines_first() {
    let h = Harness::start_real("pause-isb", PPND).await;
    h.apply::<ISBServiceRollout>(isb_rollout(json!({"version": "2.10.17"})))
        .await;
    h.apply::<PipelineRollout>(pipeline_rollout("pa")).await;
    // pf fails (Numaflow rejects its edge to a vertex that does not exist): a Failed pipeline
    // never pauses, so it is not waited on.
    let mut pf = pipeline_rollout("pf");
    pf["spec"]["pipeline"]["spec"]["edges"][1]["to"] = json!("nowhere");
    h.apply::<PipelineRollout>(pf).await;
    h.until("pa deployed", "pa", pr_settled).await;
    h.until("isb deployed", "default", isbr_settled).await;
    h.until::<Pipeline, _, _>("pf failed", "pf-0", |p| {
        (phase(p?) == "Failed").then_some(())
    })
    .await;

    // Outside the USDE lists: applied directly, nothing paused.
    h.apply::<ISBServiceRollout>(isb_rollout(json!({
        "version": "2.10.17",
        "containerTemplate": {"resources": {"limits": {"cpu": "1"}}}
    })))
    .await;
    h.until::<InterStepBufferService, _, _>("resources applied directly", "default-0", |i| {
        (i?.spec
            .pointer("/jetstream/containerTemplate/resources/limits/cpu")
            == Some(&json!("1")))
        .then_some(())
    })
    .await;
    h.stays::<ISBServiceRollout, _>(
        "no pause requested for a resources change",
        "default",
        Duration::from_secs(2),
        |r| {
            r.and_then(|r| r.status.as_ref()).is_some_and(|st| {
                st.status.upgrade_in_progress == UpgradeStrategy::NoOp
                    && pausing(&st.status.conditions).as_deref() == Some("False")
            })
        },
    )
    .await;
    h.until("pa still running", "pa-0", running_as_specified)
        .await;

    // A version change is a data-loss change: the pipelines pause first.
    h.daemon()
        .drain_after(&h.ns, "pa-0", Duration::from_secs(5));
    let pa_seen = record::<Pipeline>(&h, "pa-0").await;
    let isbsvc_seen = record::<InterStepBufferService>(&h, "default-0").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    h.apply::<ISBServiceRollout>(isb_rollout(json!({
        "version": "2.10.11",
        "containerTemplate": {"resources": {"limits": {"cpu": "1"}}}
    })))
    .await;
    let st = h
        .until::<ISBServiceRollout, _, _>("pause requested, waiting for pa-0", "default", |r| {
            let st = r?.status.as_ref()?;
            (st.status.upgrade_in_progress == UpgradeStrategy::PipelinePauseAndDrain
                && pausing(&st.status.conditions).as_deref() == Some("True")
                && st.status.phase == Phase::Pending
                && st.status.message.contains("pa-0"))
            .then(|| st.clone())
        })
        .await;
    let msg = &st.status.message;
    assert!(
        !msg.contains("pf-0"),
        "a Failed pipeline is not waited on: {msg}"
    );
    assert_eq!(
        condition(&st.status.conditions, "PausingPipelines"),
        Some((
            "True".into(),
            "Pause".into(),
            "pause needed for update".into()
        ))
    );
    assert!(
        st.pause_request_status
            .as_ref()
            .is_some_and(|p| p.last_pause_begin_time.is_some())
    );

    h.until::<InterStepBufferService, _, _>("isbsvc updated", "default-0", |i| {
        (js_version(i?) == "2.10.11").then_some(())
    })
    .await;
    h.until("pa running again", "pa-0", running_as_specified)
        .await;
    let paused_at = paused_drained_at(&pa_seen).expect("pa-0 was Paused with drainedOnPause");
    let updated_at = isbsvc_seen
        .lock()
        .expect("lock")
        .iter()
        .find(|i| js_version(i) == "2.10.11")
        .map(rv)
        .expect("isbsvc update seen");
    assert!(
        paused_at < updated_at,
        "the pipeline paused (rv {paused_at}) before the isbsvc was updated (rv {updated_at})"
    );
    let r = h.until("isb settled", "default", isbr_settled).await;
    let st = r.status.expect("status");
    assert_eq!(
        condition(&st.status.conditions, "PausingPipelines"),
        Some(("False".into(), "NoPause".into(), "no need for pause".into()))
    );
    assert!(
        st.pause_request_status
            .as_ref()
            .is_some_and(|p| p.last_pause_end_time.is_some()),
        "{:?}",
        st.pause_request_status
    );
    h.until("pa settled", "pa", pr_settled).await;
    h.until::<PipelineRollout, _, _>("pf not in a strategy", "pf", |pr| {
        (pr?.status.as_ref()?.status.upgrade_in_progress == UpgradeStrategy::NoOp).then_some(())
    })
    .await;
    assert!(
        event_reasons(&h, "ISBServiceRollout")
            .await
            .contains(&"PipelinesPaused".to_string())
    );
    h.assert_invariants().await;
}

fn ncr_settled(r: Option<&NumaflowControllerRollout>) -> Option<NumaflowControllerRollout> {
    let r = r?;
    let st = r.status.as_ref()?;
    (st.status.phase == Phase::Deployed
        && st.status.upgrade_in_progress == UpgradeStrategy::NoOp
        && st.status.observed_generation == r.metadata.generation?
        && condition(&st.status.conditions, "ChildResourcesHealthy")?.0 == "True")
        .then(|| r.clone())
}

#[tokio::test]
async fn numaflow_controller_version_change_pauses_the_namespace_first() {
    let h = Harness::start_real("pause-nc", PPND).await;
    h.until("controller deployed", "numaflow-controller", ncr_settled)
        .await;
    h.apply::<ISBServiceRollout>(isb_rollout(json!({"version": "2.10.17"})))
        .await;
    h.apply::<PipelineRollout>(pipeline_rollout("pn")).await;
    h.until("pn deployed", "pn", pr_settled).await;

    h.daemon()
        .drain_after(&h.ns, "pn-0", Duration::from_secs(5));
    let pn_seen = record::<Pipeline>(&h, "pn-0").await;
    let deployment_seen = record::<Deployment>(&h, "numaflow-controller").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    h.apply::<NumaflowControllerRollout>(nc_rollout("1.7.5"))
        .await;
    h.until::<NumaflowControllerRollout, _, _>(
        "pause requested, waiting for pn-0",
        "numaflow-controller",
        |r| {
            let st = r?.status.as_ref()?;
            (st.status.upgrade_in_progress == UpgradeStrategy::PipelinePauseAndDrain
                && pausing(&st.status.conditions).as_deref() == Some("True")
                && st.status.message.contains("pn-0"))
            .then_some(())
        },
    )
    .await;
    h.until::<Deployment, _, _>("controller image updated", "numaflow-controller", |d| {
        (image(d?) == "quay.io/numaproj/numaflow:v1.7.5").then_some(())
    })
    .await;
    h.until("pn running again", "pn-0", running_as_specified)
        .await;
    let paused_at = paused_drained_at(&pn_seen).expect("pn-0 was Paused with drainedOnPause");
    let updated_at = deployment_seen
        .lock()
        .expect("lock")
        .iter()
        .find(|d| image(d) == "quay.io/numaproj/numaflow:v1.7.5")
        .map(rv)
        .expect("Deployment update seen");
    assert!(
        paused_at < updated_at,
        "the pipeline paused (rv {paused_at}) before the Deployment was updated (rv {updated_at})"
    );
    let r = h
        .until(
            "controller rollout settled",
            "numaflow-controller",
            ncr_settled,
        )
        .await;
    let st = r.status.expect("status");
    assert_eq!(pausing(&st.status.conditions).as_deref(), Some("False"));
    assert!(
        st.pause_request_status
            .as_ref()
            .is_some_and(|p| p.last_pause_begin_time.is_some() && p.last_pause_end_time.is_some()),
        "{:?}",
        st.pause_request_status
    );
    h.until("pn settled", "pn", pr_settled).await;
    assert!(
        event_reasons(&h, "NumaflowControllerRollout")
            .await
            .contains(&"PipelinesPaused".to_string())
    );
    h.assert_invariants().await;
}

/// The value of gauge `metric` for the object named `name`.
fn gauge(text: &str, metric: &str, name: &str) -> Option<f64> {
    support::samples(text, metric)
        .into_iter()
        .find(|(labels, _)| labels.contains(&format!("name=\"{name}\"")))
        .map(|(_, v)| v)
}

fn desired_phase(p: &Pipeline) -> Option<&str> {
    p.spec
        .pointer("/lifecycle/desiredPhase")
        .and_then(Value::as_str)
}

#[tokio::test]
async fn restart_while_paused_resumes_only_after_the_update() {
    let mut h = Harness::start_real("pause-restart", PPND).await;
    h.apply::<ISBServiceRollout>(isb_rollout(json!({"version": "2.10.17"})))
        .await;
    h.apply::<PipelineRollout>(pipeline_rollout("pa")).await;
    // pb never drains and its grace period outlasts the test: it holds the request open.
    h.apply::<PipelineRollout>(pipeline_rollout_with_grace("pb", 600))
        .await;
    h.until("pa deployed", "pa", pr_settled).await;
    h.until("pb deployed", "pb", pr_settled).await;
    h.until("isb deployed", "default", isbr_settled).await;
    h.daemon().set_pending(&h.ns, "pb-0", 100);
    let pa_seen = record::<Pipeline>(&h, "pa-0").await;
    let pc_seen = record::<Pipeline>(&h, "pc-0").await;
    let isbsvc_seen = record::<InterStepBufferService>(&h, "default-0").await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    h.apply::<ISBServiceRollout>(isb_rollout(json!({"version": "2.10.11"})))
        .await;
    h.until::<Pipeline, _, _>("pa paused", "pa-0", |p| {
        (phase(p?) == "Paused").then_some(())
    })
    .await;
    h.until::<ISBServiceRollout, _, _>("waiting for pb-0", "default", |r| {
        let st = r?.status.as_ref()?;
        (st.status.upgrade_in_progress == UpgradeStrategy::PipelinePauseAndDrain
            && st.status.message.contains("pb-0"))
        .then_some(())
    })
    .await;

    // Controller down mid-way; a new PipelineRollout arrives meanwhile.
    h.stop_operator().await;
    h.apply::<PipelineRollout>(pipeline_rollout("pc")).await;
    h.stays::<Pipeline, _>(
        "pa stays paused while the controller is down",
        "pa-0",
        Duration::from_secs(2),
        |p| p.is_some_and(|p| phase(p) == "Paused"),
    )
    .await;

    // A fresh controller knows the request from status alone: pa stays paused, pc starts
    // paused, the ISB service waits for pb.
    h.restart_operator().await;
    h.until::<Pipeline, _, _>("pc created", "pc-0", |p| p.map(|_| ()))
        .await;
    let first_pc = pc_seen.lock().expect("lock").first().cloned();
    let first_pc = match first_pc {
        Some(p) => p,
        None => h.api::<Pipeline>().get("pc-0").await.expect("pc-0"),
    };
    assert_eq!(
        desired_phase(&first_pc),
        Some("Paused"),
        "a pipeline created during a pause request starts paused: {:?}",
        first_pc.spec
    );
    h.stays::<Pipeline, _>(
        "pa stays paused after the restart",
        "pa-0",
        Duration::from_secs(3),
        |p| p.is_some_and(|p| phase(p) == "Paused"),
    )
    .await;
    h.stays::<InterStepBufferService, _>(
        "isbsvc not updated while pb-0 is pausing",
        "default-0",
        Duration::from_secs(1),
        |i| i.is_some_and(|i| js_version(i) == "2.10.17"),
    )
    .await;
    h.until::<ISBServiceRollout, _, _>("still waiting for pb-0", "default", |r| {
        let st = r?.status.as_ref()?;
        (st.status.upgrade_in_progress == UpgradeStrategy::PipelinePauseAndDrain
            && st.status.message.contains("pb-0")
            && pausing(&st.status.conditions).as_deref() == Some("True"))
        .then_some(())
    })
    .await;

    // The pause gauges: the ISB service's request and pa's system pause are reported.
    let text = h.metrics.encode();
    let isb_gauge = gauge(&text, "numaflow_isbservice_paused_seconds", "default");
    assert!(isb_gauge.is_some(), "ISB request gauge reported:\n{text}");
    let pa_paused = gauge(&text, "numaflow_pipeline_system_paused_seconds", "pa");
    assert!(pa_paused.is_some(), "pa's system pause reported:\n{text}");

    // allow-data-loss on pb lets the update through; everything resumes after it.
    h.merge::<PipelineRollout>(
        "pb",
        json!({"metadata": {"annotations": {"numaplane.numaproj.io/allow-data-loss": "true"}}}),
    )
    .await;
    h.until::<InterStepBufferService, _, _>("isbsvc updated", "default-0", |i| {
        (js_version(i?) == "2.10.11").then_some(())
    })
    .await;
    h.until("isb settled", "default", isbr_settled).await;
    h.until("pa running again", "pa-0", running_as_specified)
        .await;
    h.until("pc running", "pc-0", running_as_specified).await;
    h.until("pa settled", "pa", pr_settled).await;
    h.until("pc settled", "pc", pr_settled).await;

    // Released: the ISB gauge keeps the request's length (several seconds), pa's gauges are 0.
    let text = h.metrics.encode();
    let held = gauge(&text, "numaflow_isbservice_paused_seconds", "default").unwrap_or(0.0);
    assert!(
        held >= 2.0,
        "the request lasted at least the 2+3 s held above: {held}"
    );
    assert_eq!(
        gauge(&text, "numaflow_pipeline_system_paused_seconds", "pa"),
        Some(0.0)
    );
    let updated_at = isbsvc_seen
        .lock()
        .expect("lock")
        .iter()
        .find(|i| js_version(i) == "2.10.11")
        .map(rv)
        .expect("isbsvc update seen");
    let seen = pa_seen.lock().expect("lock").clone();
    let paused_at = seen
        .iter()
        .find(|p| phase(p) == "Paused")
        .map(rv)
        .expect("pa-0 seen Paused");
    let resumed_at = seen
        .iter()
        .filter(|p| rv(*p) > paused_at)
        .find(|p| desired_phase(p) != Some("Paused"))
        .map(rv)
        .expect("pa-0 seen resumed");
    assert!(
        updated_at < resumed_at,
        "pa-0 resumed (rv {resumed_at}) only after the isbsvc update (rv {updated_at})"
    );
    h.assert_invariants().await;
}

fn isb_with_volume(size: &str) -> Value {
    isb_rollout(json!({"version": "2.10.17", "persistence": {"volumeSize": size}}))
}

fn recyclable_reason(i: &InterStepBufferService) -> Option<(String, String)> {
    let l = i.metadata.labels.as_ref()?;
    Some((
        l.get("numaplane.numaproj.io/upgrade-state")?.clone(),
        l.get("numaplane.numaproj.io/upgrade-state-reason")?.clone(),
    ))
}

/// A recreate field (`persistence.volumeSize`) replaces the ISB service
/// and its pipelines under new names; under every strategy the pipelines drain first (the
/// reference recreated at once under `no-strategy`, deleting them undrained).
async fn recreate_replaces_isb_service_and_pipelines(prefix: &str, config: &str) {
    let h = Harness::start_real(prefix, config).await;
    h.apply::<ISBServiceRollout>(isb_with_volume("10Mi")).await;
    h.apply::<PipelineRollout>(pipeline_rollout("pr")).await;
    h.until("pr deployed", "pr", pr_settled).await;
    h.until("isb deployed", "default", isbr_settled).await;
    let pr_seen = record::<Pipeline>(&h, "pr-0").await;
    let isb_seen = record::<InterStepBufferService>(&h, "default-0").await;
    let isbr_seen = record::<ISBServiceRollout>(&h, "default").await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    h.apply::<ISBServiceRollout>(isb_with_volume("20Mi")).await;
    h.until::<InterStepBufferService, _, _>("new isbsvc", "default-1", |i| {
        let i = i?;
        (i.spec.pointer("/jetstream/persistence/volumeSize") == Some(&json!("20Mi"))).then_some(())
    })
    .await;
    h.until::<Pipeline, _, _>("new pipeline on the new isbsvc", "pr-1", |p| {
        (p?.spec["interStepBufferServiceName"] == "default-1").then_some(())
    })
    .await;
    h.until::<InterStepBufferService, _, _>("old isbsvc deleted", "default-0", |i| {
        i.is_none().then_some(())
    })
    .await;
    h.until::<Pipeline, _, _>("old pipeline deleted", "pr-0", |p| {
        p.is_none().then_some(())
    })
    .await;
    h.until("isb settled", "default", isbr_settled).await;
    h.until("pr-1 running", "pr-1", running_as_specified).await;
    h.until("pr settled", "pr", pr_settled).await;

    let marked = isb_seen
        .lock()
        .expect("lock")
        .iter()
        .find_map(recyclable_reason)
        .filter(|(state, _)| state == "recyclable");
    assert_eq!(
        marked,
        Some(("recyclable".into(), "delete-recreate".into())),
        "the old isbsvc was marked recyclable for a recreate"
    );
    let pr_versions = pr_seen.lock().expect("lock").clone();
    let retired = pr_versions.iter().find(|p| {
        p.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("numaplane.numaproj.io/upgrade-state-reason"))
            .map(String::as_str)
            == Some("delete-recreate")
    });
    assert!(
        retired.is_some(),
        "pr-0 followed its isbsvc (delete-recreate)"
    );
    let went_ppnd = isbr_seen.lock().expect("lock").iter().any(|r| {
        r.status.as_ref().map(|s| &s.status.upgrade_in_progress)
            == Some(&UpgradeStrategy::PipelinePauseAndDrain)
    });
    assert!(went_ppnd, "a recreate always pauses and drains first");
    let drained = paused_drained_at(&pr_seen).expect("pr-0 drained and paused");
    let retired_at = retired.map(rv).expect("retired");
    assert!(
        drained < retired_at,
        "pr-0 drained (rv {drained}) before it was retired (rv {retired_at})"
    );
    // Exactly one live ISB service and one live pipeline remain.
    let isbs = h
        .api::<InterStepBufferService>()
        .list(&ListParams::default())
        .await
        .expect("list");
    assert_eq!(
        isbs.items
            .iter()
            .map(|i| i.metadata.name.clone())
            .collect::<Vec<_>>(),
        vec![Some("default-1".to_string())]
    );
    let pipelines = h
        .api::<Pipeline>()
        .list(&ListParams::default())
        .await
        .expect("list");
    assert_eq!(
        pipelines
            .items
            .iter()
            .map(|p| p.metadata.name.clone())
            .collect::<Vec<_>>(),
        vec![Some("pr-1".to_string())]
    );
    h.assert_invariants().await;
}

#[tokio::test]
async fn recreate_field_under_pause_and_drain_drains_then_replaces() {
    recreate_replaces_isb_service_and_pipelines("recreate-ppnd", PPND).await;
}

#[tokio::test]
async fn recreate_field_under_no_strategy_drains_then_replaces() {
    recreate_replaces_isb_service_and_pipelines(
        "recreate-direct",
        "defaultUpgradeStrategy: no-strategy\n",
    )
    .await;
}

/// A name count that fell behind a live child (the status write after its creation lost under
/// faults) is corrected as soon as the child is seen: the recreate names the new ISB service
/// default-1. Before, it deleted default-0 first and then created the new one under the same
/// name, which no longer looked taken.
#[tokio::test]
async fn a_recreate_never_reuses_the_name_of_the_child_it_replaces() {
    use kube::api::{Patch, PatchParams};
    let mut h = Harness::start_real("recreate-count", PPND).await;
    h.apply::<ISBServiceRollout>(isb_with_volume("10Mi")).await;
    h.until("isb deployed", "default", isbr_settled).await;
    h.stop_operator().await;
    // As a lost status write leaves it: the count never moved past default-0.
    h.api::<ISBServiceRollout>()
        .patch_status(
            "default",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"nameCount": 0}})),
        )
        .await
        .expect("set the count back");
    h.restart_operator().await;
    h.apply::<ISBServiceRollout>(isb_with_volume("20Mi")).await;
    h.until("isb settled on the new volume", "default", |r| {
        let r = isbr_settled(r)?;
        (r.status.as_ref()?.name_count == Some(2)).then_some(r)
    })
    .await;
    let isbs = h
        .api::<InterStepBufferService>()
        .list(&ListParams::default())
        .await
        .expect("list");
    let names: Vec<String> = isbs
        .items
        .iter()
        .filter_map(|i| i.metadata.name.clone())
        .collect();
    assert_eq!(
        names,
        vec!["default-1".to_string()],
        "the replacement has a new name"
    );
    let volume = isbs.items[0]
        .spec
        .pointer("/jetstream/persistence/volumeSize");
    assert_eq!(volume, Some(&json!("20Mi")));
    h.assert_invariants().await;
}
