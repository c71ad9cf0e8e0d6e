//! The Helm chart (`charts/numaplane`, docs/install.md#helm), rendered and installed by the real
//! Helm (built by hack/realstack-binaries.sh): with its defaults it renders the objects of
//! config/install.yaml (but the Namespace, which `helm install --create-namespace` makes); its
//! values change what they say; and it installs the operator as a pod on the test stack's real
//! node, which deploys the reference samples, then keeps working when upgraded to watch one
//! namespace with namespace-scoped RBAC.

mod support;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, Role};
use kube::api::{Api, Patch, PatchParams};
use numaplane_api::PipelineRollout;
use numaplane_testenv::TestEnv;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Output};
use support::install::*;
use support::{eventually, repo};

const RELEASE: &str = "numaplane";

fn helm_bin() -> PathBuf {
    numaplane_testenv::binaries::RealStackBinaries::locate()
        .unwrap_or_else(|e| panic!("{e:#}"))
        .helm
}

/// Runs helm with `args` in the repository (and against `env` when given).
fn helm(env: Option<&TestEnv>, args: &[&str]) -> Output {
    let home = tempfile::tempdir().expect("helm's home");
    let mut cmd = Command::new(helm_bin());
    cmd.current_dir(repo(""))
        .env("HELM_CACHE_HOME", home.path().join("cache"))
        .env("HELM_CONFIG_HOME", home.path().join("config"))
        .env("HELM_DATA_HOME", home.path().join("data"))
        .args(args);
    if let Some(env) = env {
        cmd.env("KUBECONFIG", env.kubeconfig_path());
    }
    cmd.output().expect("run helm")
}

fn helm_ok(env: Option<&TestEnv>, args: &[&str]) -> String {
    succeeded(&format!("helm {args:?}"), helm(env, args))
}

/// `helm template` of the chart in `numaplane-system`, CRDs included, with `--set` values.
fn render(set: &[&str]) -> Vec<Value> {
    let mut args = vec![
        "template",
        RELEASE,
        "charts/numaplane",
        "--namespace",
        NS,
        "--include-crds",
    ];
    for s in set {
        args.extend(["--set", s]);
    }
    yaml_documents(&helm_ok(None, &args))
}

type Key = (String, String, String);

fn key(o: &Value) -> Key {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    (
        s(&o["kind"]),
        s(&o["metadata"]["namespace"]),
        s(&o["metadata"]["name"]),
    )
}

fn by_key(objects: Vec<Value>) -> BTreeMap<Key, Value> {
    let mut map = BTreeMap::new();
    for o in objects {
        let k = key(&o);
        assert!(map.insert(k.clone(), o).is_none(), "{k:?} rendered twice");
    }
    map
}

fn find<'a>(objects: &'a [Value], kind: &str, ns: &str, name: &str) -> Option<&'a Value> {
    objects
        .iter()
        .find(|o| key(o) == (kind.into(), ns.into(), name.into()))
}

#[test]
fn the_chart_renders_the_install_for_its_defaults() {
    let install = std::fs::read_to_string(repo("config/install.yaml")).expect("install.yaml");
    let mut want = by_key(yaml_documents(&install));
    let namespace = want.remove(&("Namespace".into(), String::new(), NS.into()));
    assert!(namespace.is_some(), "install.yaml creates {NS}");
    let got = by_key(render(&[]));
    let (want_keys, got_keys): (Vec<_>, Vec<_>) = (want.keys().collect(), got.keys().collect());
    pretty_assertions::assert_eq!(want_keys, got_keys, "the same objects");
    for (k, w) in &want {
        pretty_assertions::assert_eq!(w, &got[k], "{k:?}");
    }
}

#[test]
fn the_charts_versions_follow_the_workspace() {
    let chart = std::fs::read_to_string(repo("charts/numaplane/Chart.yaml")).expect("Chart.yaml");
    let chart: Value = serde_saphyr::from_str(&chart).expect("Chart.yaml");
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(chart["version"], json!(version));
    assert_eq!(chart["appVersion"], json!(format!("v{version}")));
    helm_ok(None, &["lint", "charts/numaplane", "--strict"]);
}

#[test]
fn the_charts_values_change_what_they_say() {
    let objects = render(&[
        "image.repository=registry.example/numaplane",
        "image.tag=v9.9.9",
        "replicaCount=2",
        "leaderElection.enabled=false",
        "watchNamespace=team-a",
        "rbac.namespaced=true",
        "rbac.userRoles=false",
        "numaflowControllerDefinitions.enabled=false",
        "metrics.serviceMonitor.enabled=true",
        "metrics.podMonitor.enabled=true",
        "metrics.prometheusRule.enabled=true",
        "metrics.grafanaDashboard.enabled=true",
        "commonLabels.team=a",
        "controllerConfig=logLevel: DEBUG",
    ]);
    let d = find(&objects, "Deployment", NS, "numaplane-controller-manager").expect("Deployment");
    assert_eq!(d["spec"]["replicas"], json!(2));
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["image"], json!("registry.example/numaplane:v9.9.9"));
    let args: Vec<&str> = c["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(args.contains(&"--watch-namespace=team-a"), "{args:?}");
    assert!(!args.contains(&"--leader-elect"), "{args:?}");
    assert_eq!(d["metadata"]["labels"]["team"], json!("a"));

    // Namespace-scoped RBAC: the ClusterRole's rules as Roles where the operator watches and
    // where its configuration and lease live; no ClusterRole or ClusterRoleBinding of its own.
    let install =
        yaml_documents(&std::fs::read_to_string(repo("config/install.yaml")).expect("install"));
    let cluster_rules =
        &find(&install, "ClusterRole", "", "numaplane-role").expect("role")["rules"];
    for ns in ["team-a", NS] {
        let role = find(&objects, "Role", ns, "numaplane-role").expect("Role");
        assert_eq!(&role["rules"], cluster_rules, "{ns}");
        let binding = find(&objects, "RoleBinding", ns, "numaplane-rolebinding").expect("binding");
        assert_eq!(
            binding["roleRef"],
            json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "numaplane-role"})
        );
        assert_eq!(
            binding["subjects"],
            json!([{"kind": "ServiceAccount", "name": "numaplane-sa", "namespace": NS}])
        );
    }
    let cluster_kinds = objects
        .iter()
        .filter(|o| o["kind"] == "ClusterRole" || o["kind"] == "ClusterRoleBinding")
        .map(key)
        .collect::<Vec<_>>();
    assert!(cluster_kinds.is_empty(), "{cluster_kinds:?}");
    assert!(
        !objects
            .iter()
            .any(|o| key(o).2.starts_with("numaflow-controller-definitions-")),
        "no definitions"
    );

    let config = find(&objects, "ConfigMap", NS, "numaplane-controller-config").expect("config");
    assert_eq!(config["data"]["config.yaml"], json!("logLevel: DEBUG"));
    for (kind, name) in [
        ("ServiceMonitor", "numaplane"),
        ("PodMonitor", "numaplane"),
        ("PrometheusRule", "numaplane"),
    ] {
        let o = find(&objects, kind, NS, name).unwrap_or_else(|| panic!("{kind}"));
        let file = format!("config/monitoring/{}.yaml", kind.to_lowercase());
        let shipped =
            yaml_documents(&std::fs::read_to_string(repo(&file)).expect("monitoring file"));
        assert_eq!(o["spec"], shipped[0]["spec"], "{kind} as shipped in {file}");
    }
    let dashboard =
        find(&objects, "ConfigMap", NS, "numaplane-grafana-dashboard").expect("dashboard");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    let json_text = dashboard["data"]["numaplane.json"].as_str().expect("json");
    let shipped: Value = serde_json::from_str(
        &std::fs::read_to_string(repo("config/monitoring/grafana-dashboard.json")).expect("json"),
    )
    .expect("shipped dashboard");
    assert_eq!(
        serde_json::from_str::<Value>(json_text).expect("dashboard JSON"),
        shipped
    );

    // Namespace-scoped RBAC with nothing to scope it to is refused, naming both values.
    let out = helm(
        None,
        &[
            "template",
            RELEASE,
            "charts/numaplane",
            "--set",
            "rbac.namespaced=true",
        ],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("rbac.namespaced needs watchNamespace"),
        "{err}"
    );
}

/// Every rollout of the samples' namespace converged, after a spec change of the pipeline that
/// the operator must carry to its child.
async fn change_reaches_the_pipeline(client: &kube::Client, value: i64, what: &str) {
    let prs: Api<PipelineRollout> = Api::namespaced(client.clone(), SAMPLES);
    prs.patch(
        "my-pipeline",
        &PatchParams::default(),
        &Patch::Merge(
            json!({"spec": {"pipeline": {"spec": {"limits": {"readBatchSize": value}}}}}),
        ),
    )
    .await
    .expect("patch the PipelineRollout");
    let pipelines: Api<numaplane_api::numaflow::Pipeline> =
        Api::namespaced(client.clone(), SAMPLES);
    eventually(what, || async {
        let list = pipelines.list(&Default::default()).await.ok()?;
        list.items
            .iter()
            .any(|p| p.spec["limits"]["readBatchSize"] == json!(value))
            .then_some(())
    })
    .await;
    samples_converged(client, what).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_installs_the_operator_on_a_real_node() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = real_node_with_operator_image(dir.path()).await;
    let client = env.client();

    // As docs/install.md gives it.
    helm_ok(
        Some(&env),
        &[
            "install",
            RELEASE,
            "charts/numaplane",
            "--namespace",
            NS,
            "--create-namespace",
            "--wait",
            "--timeout",
            "3m",
        ],
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let first = wait_for_pods(&pods, 1, "the operator's pod Ready").await;
    assert_eq!(
        first[0].spec.as_ref().expect("spec").containers[0]
            .image
            .as_deref(),
        Some(
            format!(
                "ghcr.io/numaproj/numaplane-rs:v{}",
                env!("CARGO_PKG_VERSION")
            )
            .as_str()
        )
    );

    // The reference samples, unchanged, to Deployed, under the chart's Numaflow controller
    // definitions.
    kubectl(&env, &["create", "namespace", SAMPLES]);
    let ssa = PatchParams::apply("test-user").force();
    let mut ncr = support::fixtures::nc_rollout("1.8.1");
    ncr["metadata"]["namespace"] = json!(SAMPLES);
    Api::<numaplane_api::NumaflowControllerRollout>::namespaced(client.clone(), SAMPLES)
        .patch("numaflow-controller", &ssa, &Patch::Apply(&ncr))
        .await
        .expect("NumaflowControllerRollout");
    let deployments = Api::<Deployment>::namespaced(client.clone(), SAMPLES);
    eventually("the Numaflow controller available", || async {
        let d = deployments.get_opt("numaflow-controller").await.ok()??;
        (d.status?.available_replicas == Some(1)).then_some(())
    })
    .await;
    for sample in [
        "config/samples/numaplane.numaproj.io_v1alpha1_isbservicerollout.yaml",
        "config/samples/numaplane.numaproj.io_v1alpha1_pipelinerollout.yaml",
    ] {
        kubectl(&env, &["apply", "--server-side", "-f", sample]);
    }
    samples_converged(&client, "the samples Deployed by the chart's operator").await;
    change_reaches_the_pipeline(
        &client,
        250,
        "a change carried by the cluster-scoped install",
    )
    .await;

    // Upgraded to watch the samples' namespace alone, with Roles instead of the ClusterRole.
    helm_ok(
        Some(&env),
        &[
            "upgrade",
            RELEASE,
            "charts/numaplane",
            "--namespace",
            NS,
            "--reuse-values",
            "--set",
            &format!("watchNamespace={SAMPLES}"),
            "--set",
            "rbac.namespaced=true",
            "--wait",
            "--timeout",
            "3m",
        ],
    );
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    until_gone(
        &bindings,
        "numaplane-rolebinding",
        "the ClusterRoleBinding gone",
    )
    .await;
    for ns in [SAMPLES, NS] {
        let roles: Api<Role> = Api::namespaced(client.clone(), ns);
        assert!(
            roles
                .get_opt("numaplane-role")
                .await
                .ok()
                .flatten()
                .is_some(),
            "Role numaplane-role in {ns}"
        );
    }
    eventually("the operator restarted with --watch-namespace", || async {
        let list = operator_pods(&pods).await;
        (list.len() == 1
            && ready(&list[0])
            && list[0].spec.as_ref()?.containers[0]
                .args
                .as_ref()?
                .iter()
                .any(|a| a == &format!("--watch-namespace={SAMPLES}")))
        .then_some(())
    })
    .await;
    change_reaches_the_pipeline(&client, 300, "a change carried with namespace-scoped RBAC").await;

    // Uninstalled: the operator goes, the CRDs and the rollouts stay (Helm keeps crds/).
    helm_ok(
        Some(&env),
        &["uninstall", RELEASE, "--namespace", NS, "--wait"],
    );
    let operator = Api::<Deployment>::namespaced(client.clone(), NS);
    until_gone(
        &operator,
        "numaplane-controller-manager",
        "the operator's Deployment gone",
    )
    .await;
    let prs: Api<PipelineRollout> = Api::namespaced(client.clone(), SAMPLES);
    assert!(
        prs.get_opt("my-pipeline").await.ok().flatten().is_some(),
        "the rollouts outlive the chart"
    );
}
