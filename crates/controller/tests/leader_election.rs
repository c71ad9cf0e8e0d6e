//! Two controller processes against one control plane: only the lease holder writes, a standby
//! takes over when the leader dies and finishes the rollout, and SIGTERM releases the lease at
//! once.

mod support;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use numaplane_api::common::Phase;
use numaplane_api::{ISBServiceRollout, PipelineRollout};
use numaplane_testenv::TestEnv;
use serde_json::json;
use std::time::{Duration, Instant};
use support::{
    Process, eventually, install_numaflow, install_rbac, label_after_failover, lease_holder,
    samples,
};

/// Writes a process made to anything but its lease and Events.
fn writes(metrics: &str) -> f64 {
    samples(metrics, "numaplane_kube_requests_total")
        .iter()
        .filter(|(l, _)| {
            ["CREATE", "UPDATE", "PATCH", "DELETE"]
                .iter()
                .any(|v| l.contains(&format!(r#"verb="{v}""#)))
                && !l.contains(r#"resource="leases""#)
                && !l.contains(r#"resource="events""#)
        })
        .map(|(_, v)| v)
        .sum()
}

#[tokio::test]
async fn only_the_leader_writes_and_a_standby_takes_over() {
    let env = TestEnv::shared_real().await;
    let client = env.client();
    install_rbac(&client).await;
    let ns = env.create_namespace("lease").await;
    let history = support::invariants::Recorder::start(&client, &ns).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("config.yaml");
    let config_text = "defaultUpgradeStrategy: no-strategy\n";
    std::fs::write(&config, config_text).expect("config");
    history.configure(config_text);
    let leases: Api<Lease> = Api::namespaced(client.clone(), "numaplane-system");

    let a = Process::start(env, &ns, &config, dir.path(), "a", &["--leader-elect"]);
    eventually("a ready", || async {
        (a.probe("/readyz").await == Some(200)).then_some(())
    })
    .await;
    eventually("a holds the lease", || async {
        lease_holder(&leases).await.filter(|h| h.starts_with("a_"))
    })
    .await;
    install_numaflow(&client, "numaplane-system", &ns, "1.8.1").await;
    let b = Process::start(env, &ns, &config, dir.path(), "b", &["--leader-elect"]);
    eventually("b ready as a warm standby", || async {
        (b.probe("/readyz").await == Some(200)).then_some(())
    })
    .await;

    let isbrs: Api<ISBServiceRollout> = Api::namespaced(client.clone(), &ns);
    let prs: Api<PipelineRollout> = Api::namespaced(client.clone(), &ns);
    isbrs
        .create(
            &Default::default(),
            &serde_json::from_value(json!({
                "apiVersion": "numaplane.numaproj.io/v1alpha1", "kind": "ISBServiceRollout",
                "metadata": {"name": "default"},
                "spec": {"interStepBufferService": {"spec": {"jetstream": {"version": "2.10.17"}}}}
            }))
            .expect("isbr"),
        )
        .await
        .expect("create isbr");
    prs.create(
        &Default::default(),
        &serde_json::from_value(json!({
            "apiVersion": "numaplane.numaproj.io/v1alpha1", "kind": "PipelineRollout",
            "metadata": {"name": "pr"},
            "spec": {"pipeline": {"spec": {
                "vertices": [
                    {"name": "in", "scale": {"min": 1, "max": 1}, "source": {"generator": {}}},
                    {"name": "out", "scale": {"min": 1, "max": 1}, "sink": {"log": {}}}
                ],
                "edges": [{"from": "in", "to": "out"}]
            }}}
        }))
        .expect("pr"),
    )
    .await
    .expect("create pr");
    eventually("deployed by the leader", || async {
        (prs.get("pr").await.ok()?.status?.status.phase == Phase::Deployed).then_some(())
    })
    .await;
    assert!(writes(&a.metrics_text().await) > 0.0, "the leader wrote");
    assert_eq!(
        writes(&b.metrics_text().await),
        0.0,
        "the standby wrote nothing"
    );
    let b_leader = samples(&b.metrics_text().await, "numaplane_leader");
    assert_eq!(b_leader.first().map(|s| s.1), Some(0.0));

    // The leader dies without releasing: the standby takes over within the lease duration and
    // carries a new change through.
    a.signal("-KILL");
    let started = Instant::now();
    label_after_failover(&client, &ns, "the standby applies the change").await;
    assert!(
        started.elapsed() < Duration::from_secs(45),
        "took over in {:?}",
        started.elapsed()
    );
    assert!(
        lease_holder(&leases)
            .await
            .is_some_and(|h| h.starts_with("b_"))
    );
    assert!(writes(&b.metrics_text().await) > 0.0);

    // SIGTERM: in-flight work finishes, the lease is released at once, exit 0.
    b.signal("-TERM");
    let mut b = b;
    let exit = tokio::task::spawn_blocking(move || (b.child.wait(), b))
        .await
        .expect("join");
    assert!(exit.0.expect("wait").success(), "clean exit");
    assert_eq!(
        lease_holder(&leases).await,
        None,
        "lease released on shutdown"
    );
    history.assert_held(&client, &ns).await;
}

/// An API server that refuses the lease (here: RBAC not applied yet; in production also a
/// restart or an overload) is waited for: the process stays up, not ready with the reason, and
/// leads as soon as the lease can be set up. It used to exit.
#[tokio::test]
async fn a_lease_the_api_server_refuses_is_waited_for() {
    use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
    let env = TestEnv::start_with(Default::default())
        .await
        .expect("a control plane of its own (no RBAC for the operator yet)");
    let client = env.client();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, "defaultUpgradeStrategy: no-strategy\n").expect("config");
    let mut p = Process::start(
        &env,
        "default",
        &config,
        dir.path(),
        "refused",
        &["--leader-elect"],
    );
    let why = eventually("not ready, saying why", || async {
        let (code, body) = support::http_get(p.health, "/readyz").await?;
        (code != 200 && body.contains("setting up the lease")).then_some(body)
    })
    .await;
    assert!(
        why.contains("forbidden"),
        "the reason names the refusal: {why}"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        p.child.try_wait().expect("process state").is_none(),
        "the operator waits instead of exiting:\n{}",
        p.log_text()
    );
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "operator-now-allowed"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "Group", "name": "system:serviceaccounts:numaplane-system", "apiGroup": "rbac.authorization.k8s.io"}]
    }))
    .expect("binding");
    let ns: k8s_openapi::api::core::v1::Namespace = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "numaplane-system"}
    }))
    .expect("namespace");
    let _ = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .create(&Default::default(), &ns)
        .await;
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&Default::default(), &binding)
        .await
        .expect("grant the operator");
    let leases: Api<Lease> = Api::namespaced(client.clone(), "numaplane-system");
    eventually("it leads once allowed", || async {
        lease_holder(&leases)
            .await
            .filter(|h| h.starts_with("refused_"))
    })
    .await;
    eventually("ready once it leads", || async {
        (p.probe("/readyz").await == Some(200)).then_some(())
    })
    .await;
}
