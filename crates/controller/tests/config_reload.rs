//! The controller config file is reloaded live: a change takes effect without a restart, and
//! an invalid file keeps the last good configuration (and says so in an Event).

mod support;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kube::api::ListParams;
use numaplane_api::common::Phase;
use numaplane_api::{ISBServiceRollout, PipelineRollout};
use serde_json::json;
use support::{Harness, TEST_CONFIG, eventually};

const NO_CONFIGMAP_RIDERS: &str = r#"
logLevel: INFO
defaultUpgradeStrategy: no-strategy
permittedRiders: "group=autoscaling,kind=HorizontalPodAutoscaler"
"#;

#[tokio::test]
async fn config_file_changes_apply_live_and_bad_ones_are_refused() {
    let h = Harness::start_real_with_config("cfg", support::TEST_CONFIG).await;
    h.apply::<ISBServiceRollout>(json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "ISBServiceRollout",
        "metadata": {"name": "default"},
        "spec": {"interStepBufferService": {"spec": {"jetstream": {"version": "2.10.17"}}}}
    }))
    .await;
    let rollout = json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "PipelineRollout",
        "metadata": {"name": "pr"},
        "spec": {
            "pipeline": {"spec": {
                "vertices": [
                    {"name": "in", "scale": {"min": 1, "max": 1}, "source": {"generator": {}}},
                    {"name": "out", "scale": {"min": 1, "max": 1}, "sink": {"log": {}}}
                ],
                "edges": [{"from": "in", "to": "out"}]
            }},
            "riders": [{"perVertex": true, "definition": {
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "cm"},
                "data": {"vertex": "{{.vertex-name}}", "pipeline": "{{.pipeline-name}}"}
            }}]
        }
    });
    h.apply::<PipelineRollout>(rollout.clone()).await;
    h.until::<PipelineRollout, _, _>("deployed with per-vertex riders", "pr", |pr| {
        (pr?.status.as_ref()?.status.phase == Phase::Deployed).then_some(())
    })
    .await;
    for v in ["in", "out"] {
        let cm: ConfigMap = h
            .api()
            .get(&format!("cm-pr-0-{v}"))
            .await
            .expect("per-vertex rider");
        let data = cm.data.expect("data");
        assert_eq!(
            (data["vertex"].as_str(), data["pipeline"].as_str()),
            (v, "pr-0")
        );
    }

    // Forbid ConfigMap riders: the rollout fails, saying why, without a restart.
    std::fs::write(&h.config_file, NO_CONFIGMAP_RIDERS).expect("write config");
    h.until::<PipelineRollout, _, _>("rider refused after reload", "pr", |pr| {
        let st = &pr?.status.as_ref()?.status;
        (st.phase == Phase::Failed && st.message.contains("unpermitted")).then_some(())
    })
    .await;

    // An invalid file is refused: the last good config (riders forbidden) stays in force.
    std::fs::write(&h.config_file, "defaultUpgradeStrategy: sideways\n").expect("write");
    let events: kube::Api<Event> = kube::Api::namespaced(h.client.clone(), "numaplane-system");
    let ev = eventually("an InvalidConfig event", || async {
        events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some("InvalidConfig")
                    && e.note.as_deref().unwrap_or_default().contains("sideways")
            })
    })
    .await;
    assert!(
        ev.note
            .unwrap_or_default()
            .contains("defaultUpgradeStrategy")
    );
    let pr: PipelineRollout = h.api().get("pr").await.expect("pr");
    assert_eq!(pr.status.expect("status").status.phase, Phase::Failed);

    // A namespace-level strategy ConfigMap with a bad value is reported on that ConfigMap.
    let bad_ns_config: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "my-config", "labels": {"numaplane.numaproj.io/config": "namespace-level-config"}},
        "data": {"upgradeStrategy": "fast-and-loose"}
    }))
    .expect("configmap");
    h.api::<ConfigMap>()
        .create(&Default::default(), &bad_ns_config)
        .await
        .expect("create namespace config");
    let ns_events: kube::Api<Event> = kube::Api::namespaced(h.client.clone(), &h.ns);
    eventually(
        "an InvalidConfig event on the namespace ConfigMap",
        || async {
            ns_events
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some("InvalidConfig")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("my-config")
                        && e.note
                            .as_deref()
                            .unwrap_or_default()
                            .contains("fast-and-loose")
                })
        },
    )
    .await;

    // Back to the permissive config: deployed again.
    std::fs::write(&h.config_file, TEST_CONFIG).expect("write config");
    h.until::<PipelineRollout, _, _>("deployed after restoring the config", "pr", |pr| {
        (pr?.status.as_ref()?.status.phase == Phase::Deployed).then_some(())
    })
    .await;
    h.assert_invariants().await;
}

/// The ConfigMaps are read before the operator reconciles anything: a reconcile that found no
/// USDE config yet would apply a change that needs a pause directly.
#[tokio::test]
async fn configmaps_are_read_before_the_first_reconcile() {
    let mut h = Harness::start_real("cfgfirst", TEST_CONFIG).await;
    // The watch says it has listed only once what it listed is in force.
    let settings = std::sync::Arc::new(numaplane::settings::Settings::new(Default::default()));
    let (listed, read) = tokio::sync::oneshot::channel();
    let watch = tokio::spawn(numaplane::config_watch::watch_configmaps(
        h.env.operator_client(),
        Some(h.ns.clone()),
        settings.clone(),
        numaplane::events::EventSink::new(h.client.clone(), None),
        h.ns.clone(),
        listed,
    ));
    read.await
        .expect("the ConfigMap watch says when it has listed");
    assert!(
        settings.usde().is_some(),
        "the ConfigMap watch said it had listed before the USDE config was in force"
    );
    watch.abort();

    // The operator, the moment `Operator::start` returns. Also: an operator stopped the moment
    // it started stops (it once hung, its controllers' runners waiting for a first list their
    // stopped watches would never make).
    for _ in 0..3 {
        h.restart_operator().await;
        let operator = h.operator.as_ref().expect("operator running");
        let usde = operator.ctx.settings.usde();
        assert!(
            usde.is_some(),
            "the operator started reconciling before it read the USDE ConfigMap"
        );
    }
}
