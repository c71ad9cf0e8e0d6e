//! The controller binary as an SRE runs it: `/readyz` only after the caches sync, `/healthz`
//! always, `/metrics` with the reference metric names after a rollout is reconciled, and the
//! log level following the config file without a restart.

mod support;

use numaplane_api::common::Phase;
use numaplane_api::{ISBServiceRollout, PipelineRollout};
use numaplane_testenv::TestEnv;
use serde_json::json;
use std::time::Duration;
use support::{Process, eventually, install_numaflow, install_rbac, samples};

#[tokio::test]
async fn probes_metrics_and_live_log_level() {
    let env = TestEnv::shared_real().await;
    let client = env.client();
    let ns = env.create_namespace("ops").await;
    let history = support::invariants::Recorder::start(&client, &ns).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("config.yaml");
    let config_text = "logLevel: INFO\ndefaultUpgradeStrategy: no-strategy\n";
    std::fs::write(&config, config_text).expect("config");
    history.configure(config_text);

    // Before the operator identity may list anything, its caches cannot sync: alive, not ready.
    let p = Process::start(env, &ns, &config, dir.path(), "ops", &[]);
    eventually("/healthz answers", || async {
        (p.probe("/healthz").await == Some(200)).then_some(())
    })
    .await;
    // The jemalloc configuration compiled in from .cargo/config.toml is in force: its background
    // thread returns freed pages while the controller idles (bench/README.md).
    let threads = std::fs::read_dir(format!("/proc/{}/task", p.child.id())).expect("tasks");
    let names: Vec<String> = threads
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_string())
        .collect();
    assert!(
        names.iter().any(|n| n == "jemalloc_bg_thd"),
        "no jemalloc background thread among {names:?}"
    );
    for _ in 0..10 {
        assert_eq!(
            p.probe("/readyz").await,
            Some(503),
            "ready before caches synced"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    install_rbac(&client).await;
    eventually("/readyz once caches sync", || async {
        (p.probe("/readyz").await == Some(200)).then_some(())
    })
    .await;

    // Reconcile something, then read the exposition.
    install_numaflow(&client, "numaplane-system", &ns, "1.8.1").await;
    let isbr: ISBServiceRollout = serde_json::from_value(json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1", "kind": "ISBServiceRollout",
        "metadata": {"name": "default", "namespace": ns},
        "spec": {"interStepBufferService": {"spec": {"jetstream": {"version": "2.10.17"}}}}
    }))
    .expect("isbr");
    let prs: kube::Api<PipelineRollout> = kube::Api::namespaced(client.clone(), &ns);
    kube::Api::<ISBServiceRollout>::namespaced(client.clone(), &ns)
        .create(&Default::default(), &isbr)
        .await
        .expect("create isbr");
    let pr: PipelineRollout = serde_json::from_value(json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1", "kind": "PipelineRollout",
        "metadata": {"name": "pr", "namespace": ns},
        "spec": {"pipeline": {"spec": {
            "vertices": [
                {"name": "in", "scale": {"min": 1, "max": 1}, "source": {"generator": {}}},
                {"name": "out", "scale": {"min": 1, "max": 1}, "sink": {"log": {}}}
            ],
            "edges": [{"from": "in", "to": "out"}]
        }}}
    }))
    .expect("pr");
    prs.create(&Default::default(), &pr)
        .await
        .expect("create pr");
    eventually("PipelineRollout deployed", || async {
        let pr = prs.get("pr").await.ok()?;
        (pr.status?.status.phase == Phase::Deployed).then_some(())
    })
    .await;

    let text = eventually("health series of pr", || async {
        let t = p.metrics_text().await;
        samples(&t, "numaplane_pipeline_rollout_health")
            .iter()
            .any(|(l, v)| l.contains(r#"pipeline="pr""#) && *v == 1.0)
            .then_some(t)
    })
    .await;
    let health = samples(&text, "numaplane_pipeline_rollout_health");
    let pr_series: Vec<_> = health
        .iter()
        .filter(|(l, _)| l.contains(r#"pipeline="pr""#))
        .collect();
    assert_eq!(pr_series.len(), 1, "one series per object: {pr_series:?}");
    let labels = &pr_series[0].0;
    for l in [
        format!(r#"namespace="{ns}""#),
        r#"phase="Deployed""#.to_string(),
        r#"promotedChildFailure="#.to_string(),
        r#"progressiveFailure="#.to_string(),
        r#"intuit_alert="true""#.to_string(),
    ] {
        assert!(labels.contains(&l), "{l} missing in {labels}");
    }
    for name in [
        "pipeline_rollout_syncs_total",
        "isb_service_rollout_syncs_total",
        "numaplane_kube_request_total",
        "numaplane_reconcile_duration_seconds_count",
    ] {
        let total: f64 = samples(&text, name).iter().map(|(_, v)| v).sum();
        assert!(total > 0.0, "{name} not counted:\n{text}");
    }
    // Every family exposed is one of the reference's (docs/compatibility.md) or ours, with its type, in
    // the Prometheus text format the reference serves; those this scenario exercises are there.
    let families: Vec<(String, String)> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(n, t)| (n.to_string(), t.to_string()))
        .collect();
    for (name, kind) in &families {
        assert!(
            METRIC_FAMILIES.contains(&(name.as_str(), kind.as_str())),
            "{name} ({kind}) is not a known family"
        );
    }
    for must in [
        "numaplane_pipeline_rollout_health",
        "pipeline_rollouts_running",
        "pipeline_rollout_syncs_total",
        "pipeline_rollout_queue_length",
        "numaplane_reconciliation_duration_seconds",
        "numaplane_kube_request_total",
        "numaplane_kube_resource_monitored",
        "numaplane_kube_resource_cache",
        "numaplane_reconcile_duration_seconds",
        "numaplane_kube_requests_total",
        "numaplane_leader",
        "numaplane_build_info",
        "controller_runtime_reconcile_total",
        "controller_runtime_reconcile_time_seconds",
        "rest_client_requests_total",
    ] {
        assert!(
            families.iter().any(|(n, _)| n == must),
            "{must} missing:\n{text}"
        );
    }
    assert!(!text.contains("# EOF"), "Prometheus text, not OpenMetrics");
    // The reference's cache gauge counts the cached objects (refreshed every 10 s).
    eventually("numaplane_kube_resource_cache counting", || async {
        let t = p.metrics_text().await;
        let cached: f64 = samples(&t, "numaplane_kube_resource_cache")
            .iter()
            .map(|(_, v)| v)
            .sum();
        (cached > 0.0).then_some(())
    })
    .await;
    let running = samples(&text, "pipeline_rollouts_running");
    assert!(
        running
            .iter()
            .any(|(l, v)| l.contains(&format!(r#"namespace="{ns}""#)) && *v == 1.0),
        "{running:?}"
    );
    assert!(
        samples(&text, "numaplane_reconciliation_duration_seconds_count")
            .iter()
            .any(|(l, _)| l.contains(r#"type="pipeline-rollout-controller""#)
                && l.contains(r#"phase="create""#)),
        "create duration recorded"
    );
    let writes: f64 = samples(&text, "numaplane_kube_requests_total")
        .iter()
        .filter(|(l, _)| l.contains(r#"verb="PATCH""#) && l.contains(r#"resource="pipelines""#))
        .map(|(_, v)| v)
        .sum();
    assert!(
        writes >= 1.0,
        "the child apply is counted by verb and resource"
    );
    // (Like client_golang, labelled families without series are not exposed at all.)
    for family in [
        "# TYPE numaplane_isb_services_rollout_health gauge",
        "# TYPE numaplane_pipeline_rollout_health gauge",
        "# TYPE numaplane_reconciliation_duration_seconds histogram",
        "# TYPE pipeline_rollout_syncs_total counter",
        "# TYPE numaplane_kube_resource_monitored gauge",
    ] {
        assert!(text.contains(family), "{family} missing");
    }
    assert!(
        samples(&text, "numaplane_isb_services_rollout_health")
            .iter()
            .any(|(l, v)| l.contains(r#"isbservice="default""#) && *v == 1.0),
        "ISBServiceRollout health series"
    );

    // A new rollout's first pass creates its child from the cache alone: the finalizer patch
    // that tested it absent proves no child was made before (no live LIST of pipelines).
    let lists = |t: &str| -> f64 {
        samples(t, "numaplane_kube_requests_total")
            .iter()
            .filter(|(l, _)| l.contains(r#"verb="LIST""#) && l.contains(r#"resource="pipelines""#))
            .map(|(_, v)| v)
            .sum()
    };
    let before = lists(&p.metrics_text().await);
    let mut second = pr.clone();
    second.metadata.name = Some("pr-second".into());
    prs.create(&Default::default(), &second)
        .await
        .expect("create pr-second");
    eventually("pr-second deployed", || async {
        let pr = prs.get("pr-second").await.ok()?;
        (pr.status?.status.phase == Phase::Deployed).then_some(())
    })
    .await;
    let created: Vec<_> =
        kube::Api::<numaplane_api::numaflow::Pipeline>::namespaced(client.clone(), &ns)
            .list(&Default::default())
            .await
            .expect("pipelines")
            .items
            .into_iter()
            .filter(|c| {
                c.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with("pr-second-"))
            })
            .collect();
    assert_eq!(created.len(), 1, "one child for pr-second");
    assert_eq!(
        lists(&p.metrics_text().await) - before,
        0.0,
        "a new rollout's child is created without a live list"
    );

    // Log level follows the config file: no DEBUG lines at INFO, some after switching.
    assert!(
        !p.log_text().contains(r#""level":"DEBUG""#),
        "DEBUG logged at INFO"
    );
    std::fs::write(
        &config,
        "logLevel: DEBUG\ndefaultUpgradeStrategy: no-strategy\n",
    )
    .expect("config");
    eventually("DEBUG lines after the switch", || async {
        // Any reconcile logs at DEBUG; poke the rollout until one has run under the new level.
        let _ = prs
            .patch(
                "pr",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(
                    json!({"metadata": {"labels": {"poke": format!("{}", rand_nanos())}}}),
                ),
            )
            .await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        p.log_text().contains(r#""level":"DEBUG""#).then_some(())
    })
    .await;

    // SIGTERM: a clean exit.
    p.signal("-TERM");
    let mut p = p;
    let status = tokio::task::spawn_blocking(move || {
        let s = p.child.wait();
        (s, p)
    })
    .await
    .expect("join");
    assert!(
        status.0.expect("wait").success(),
        "exit status after SIGTERM"
    );
    history.assert_held(&client, &ns).await;
}

fn rand_nanos() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0)
}

/// Every metric family the controller may expose, with its type: the reference's (docs/compatibility.md;
/// counters named as it exposes them, `progressive_pipeline_drains` without `_total`) and ours.
const METRIC_FAMILIES: &[(&str, &str)] = &[
    ("numaplane_pipeline_rollout_health", "gauge"),
    ("numaplane_isb_services_rollout_health", "gauge"),
    ("numaplane_monovertex_rollout_health", "gauge"),
    ("numaflow_controller_rollout_health", "gauge"),
    ("numaflow_controller_health", "gauge"),
    ("pipeline_rollouts_running", "gauge"),
    ("isb_service_rollouts_running", "gauge"),
    ("monovertex_rollouts_running", "gauge"),
    ("numaflow_controller_rollouts_running", "gauge"),
    ("pipeline_rollout_syncs_total", "counter"),
    ("pipeline_rollout_sync_errors_total", "counter"),
    ("isb_service_rollout_syncs_total", "counter"),
    ("isb_service_rollout_sync_errors_total", "counter"),
    ("monovertex_rollout_syncs_total", "counter"),
    ("monovertex_rollout_sync_errors_total", "counter"),
    ("numaflow_controller_rollout_syncs_total", "counter"),
    ("numaflow_controller_rollout_sync_errors_total", "counter"),
    ("numaflow_controller_syncs_total", "counter"),
    ("numaflow_controller_sync_errors_total", "counter"),
    ("numaflow_controller_kubectl_execution_total", "counter"),
    ("pipeline_rollout_queue_length", "gauge"),
    ("progressive_pipeline_drains", "counter"),
    ("numaflow_pipeline_system_paused_seconds", "gauge"),
    ("numaflow_pipeline_system_pausing_seconds", "gauge"),
    ("numaflow_isbservice_paused_seconds", "gauge"),
    ("numaflow_controller_rollout_paused_seconds", "gauge"),
    ("numaplane_reconciliation_duration_seconds", "histogram"),
    ("numaplane_kube_request_total", "counter"),
    ("numaplane_kube_resource_monitored", "gauge"),
    ("numaplane_kube_resource_cache", "gauge"),
    ("numaplane_cluster_cache_error_total", "counter"),
    ("numaplane_pipeline_progressive_started", "counter"),
    ("numaplane_pipeline_progressive_completed", "counter"),
    ("numaplane_isbsvc_progressive_started", "counter"),
    ("numaplane_isbsvc_progressive_completed", "counter"),
    ("numaplane_monovertex_progressive_started", "counter"),
    ("numaplane_monovertex_progressive_completed", "counter"),
    // controller-runtime's, as dashboards built on the reference read them.
    ("controller_runtime_reconcile_total", "counter"),
    ("controller_runtime_reconcile_errors_total", "counter"),
    ("controller_runtime_reconcile_time_seconds", "histogram"),
    ("rest_client_requests_total", "counter"),
    // Ours.
    ("numaplane_reconcile_duration_seconds", "histogram"),
    ("numaplane_reconcile_errors_total", "counter"),
    ("numaplane_due_step_delay_seconds", "histogram"),
    ("numaplane_kube_requests_total", "counter"),
    ("numaplane_leader", "gauge"),
    ("numaplane_fenced_writes_total", "counter"),
    ("numaplane_build_info", "gauge"),
];
