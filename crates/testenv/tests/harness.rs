//! The test control plane behaves like a real cluster: CRUD and watch, garbage collection,
//! namespace deletion, RBAC for the operator identity, and the CRDs Numaplane needs.
//! Needs the binaries from `make testenv-binaries`; without them every test fails.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, ObjectMeta,
    PostParams, WatchEvent, WatchParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use numaplane_testenv::controlplane::{
    OPERATOR_NAMESPACE, OPERATOR_SERVICE_ACCOUNT, OPERATOR_USER,
};
use numaplane_testenv::{TestEnv, TestEnvOptions};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(200);

/// Polls `check` until it returns `Some`, failing the test after `limit`.
async fn eventually<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    tokio::time::timeout(limit, async {
        loop {
            if let Some(v) = check().await {
                return v;
            }
            tokio::time::sleep(POLL).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out after {limit:?} waiting for {what}"))
}

fn configmap(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect(),
        ),
        ..ConfigMap::default()
    }
}

fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

async fn whoami(client: kube::Client) -> (String, Vec<String>) {
    let review = Api::<SelfSubjectReview>::all(client)
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .expect("SelfSubjectReview");
    let user = review
        .status
        .and_then(|s| s.user_info)
        .expect("review has user info");
    (
        user.username.unwrap_or_default(),
        user.groups.unwrap_or_default(),
    )
}

#[tokio::test]
async fn crud_and_watch() {
    let env = TestEnv::shared().await;
    let ns = env.create_namespace("crud").await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), &ns);

    // Watch from the list's resourceVersion so no event can be missed.
    let rv = api
        .list(&ListParams::default())
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("list resourceVersion");
    let mut events = api
        .watch(&WatchParams::default(), &rv)
        .await
        .expect("watch")
        .boxed();

    let created = api
        .create(&PostParams::default(), &configmap("cm", &[("k", "v1")]))
        .await
        .expect("create");
    let got = api.get("cm").await.expect("get");
    assert_eq!(got.data.expect("data")["k"], "v1");
    assert_eq!(got.metadata.uid, created.metadata.uid);

    let mut updated = configmap("cm", &[("k", "v2")]);
    updated.metadata.resource_version = got.metadata.resource_version;
    let updated = api
        .replace("cm", &PostParams::default(), &updated)
        .await
        .expect("update");
    assert_eq!(updated.data.expect("data")["k"], "v2");
    assert_ne!(
        updated.metadata.resource_version,
        created.metadata.resource_version
    );

    api.delete("cm", &DeleteParams::default())
        .await
        .expect("delete");
    let err = api.get("cm").await.expect_err("deleted object is gone");
    assert_eq!(status_code(&err), Some(404), "{err}");

    let mut seen = Vec::new();
    tokio::time::timeout(WAIT, async {
        while seen.len() < 3 {
            let ev = events
                .try_next()
                .await
                .expect("watch stream")
                .expect("watch ended");
            let (kind, cm) = match ev {
                WatchEvent::Added(cm) => ("ADDED", cm),
                WatchEvent::Modified(cm) => ("MODIFIED", cm),
                WatchEvent::Deleted(cm) => ("DELETED", cm),
                WatchEvent::Bookmark(_) => continue,
                WatchEvent::Error(e) => panic!("watch error: {e:?}"),
            };
            let value = cm
                .data
                .and_then(|d| d.get("k").cloned())
                .unwrap_or_default();
            seen.push(format!(
                "{kind} {} {value}",
                cm.metadata.name.unwrap_or_default()
            ));
        }
    })
    .await
    .unwrap_or_else(|_| panic!("watch saw only {seen:?}"));
    assert_eq!(seen, ["ADDED cm v1", "MODIFIED cm v2", "DELETED cm v2"]);
}

#[tokio::test]
async fn garbage_collector_deletes_dependents() {
    collects_garbage(TestEnv::shared().await).await;
}

/// kube-controller-manager killed (as kube-scheduler exits on purpose when its cache is
/// corrupted) is started again, as a kubelet restarts a static pod: garbage is still collected.
#[tokio::test]
async fn an_exited_controller_manager_is_started_again() {
    let env = TestEnv::start().await.expect("environment");
    let pid = env.pid_of("kube-controller-manager").expect("its pid");
    std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .expect("kill");
    eventually("kube-controller-manager started again", WAIT, || async {
        env.pid_of("kube-controller-manager")
            .filter(|p| *p != pid)
            .map(|_| ())
    })
    .await;
    collects_garbage(&env).await;
}

/// The garbage collector deletes a dependent of a deleted owner, and nothing else.
async fn collects_garbage(env: &TestEnv) {
    let ns = env.create_namespace("gc").await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), &ns);
    let pp = PostParams::default();

    let owner = api
        .create(&pp, &configmap("owner", &[]))
        .await
        .expect("create owner");
    let mut dependent = configmap("dependent", &[]);
    dependent.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: "owner".into(),
        uid: owner.metadata.uid.clone().expect("owner uid"),
        ..OwnerReference::default()
    }]);
    api.create(&pp, &dependent).await.expect("create dependent");
    api.create(&pp, &configmap("bystander", &[]))
        .await
        .expect("create bystander");

    api.delete("owner", &DeleteParams::background())
        .await
        .expect("delete owner");
    eventually(
        "the garbage collector to delete the dependent",
        WAIT,
        || {
            let api = api.clone();
            async move {
                match api.get("dependent").await {
                    Err(e) if status_code(&e) == Some(404) => Some(()),
                    Ok(_) => None,
                    Err(e) => panic!("get dependent: {e}"),
                }
            }
        },
    )
    .await;
    api.get("bystander")
        .await
        .expect("an object without owners survives");
}

#[tokio::test]
async fn namespace_deletion_completes() {
    let env = TestEnv::shared().await;
    let ns = env.create_namespace("nsdel").await;
    let client = env.client();
    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &configmap("content", &[]))
        .await
        .expect("create content");

    let namespaces: Api<Namespace> = Api::all(client);
    namespaces
        .delete(&ns, &DeleteParams::default())
        .await
        .expect("delete namespace");
    eventually("the namespace to disappear", WAIT, || {
        let namespaces = namespaces.clone();
        let ns = ns.clone();
        async move {
            match namespaces.get(&ns).await {
                Err(e) if status_code(&e) == Some(404) => Some(()),
                Ok(_) => None,
                Err(e) => panic!("get namespace: {e}"),
            }
        }
    })
    .await;
}

#[tokio::test]
async fn identities_are_authenticated_as_documented() {
    let env = TestEnv::shared().await;
    let (user, groups) = whoami(env.client()).await;
    assert!(
        groups.iter().any(|g| g == "system:masters"),
        "{user} {groups:?}"
    );

    let (user, groups) = whoami(env.operator_client()).await;
    assert_eq!(user, OPERATOR_USER);
    assert!(
        groups.contains(&format!("system:serviceaccounts:{OPERATOR_NAMESPACE}")),
        "{groups:?}"
    );
    assert!(!groups.iter().any(|g| g == "system:masters"), "{groups:?}");
}

#[tokio::test]
async fn operator_identity_is_bound_by_rbac() {
    let env = TestEnv::shared().await;
    let ns = env.create_namespace("rbac").await;
    let admin = env.client();
    let pp = PostParams::default();
    Api::<ConfigMap>::namespaced(admin.clone(), &ns)
        .create(&pp, &configmap("visible", &[]))
        .await
        .expect("create configmap");

    let op_cms: Api<ConfigMap> = Api::namespaced(env.operator_client(), &ns);
    let op_secrets: Api<Secret> = Api::namespaced(env.operator_client(), &ns);
    let err = op_secrets
        .list(&ListParams::default())
        .await
        .expect_err("no role bound: listing secrets is forbidden");
    assert_eq!(status_code(&err), Some(403), "{err}");
    let err = op_cms.get("visible").await.expect_err("no role bound yet");
    assert_eq!(status_code(&err), Some(403), "{err}");

    let role = Role {
        metadata: ObjectMeta {
            name: Some("read-configmaps".into()),
            ..ObjectMeta::default()
        },
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["configmaps".into()]),
            verbs: vec!["get".into()],
            ..PolicyRule::default()
        }]),
    };
    Api::<Role>::namespaced(admin.clone(), &ns)
        .create(&pp, &role)
        .await
        .expect("create role");
    let binding = RoleBinding {
        metadata: ObjectMeta {
            name: Some("operator-reads-configmaps".into()),
            ..ObjectMeta::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "Role".into(),
            name: "read-configmaps".into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: OPERATOR_SERVICE_ACCOUNT.into(),
            namespace: Some(OPERATOR_NAMESPACE.into()),
            ..Subject::default()
        }]),
    };
    Api::<RoleBinding>::namespaced(admin, &ns)
        .create(&pp, &binding)
        .await
        .expect("create rolebinding");

    // The authorizer's RBAC cache catches up within moments.
    eventually("the role binding to take effect", WAIT, || {
        let op_cms = op_cms.clone();
        async move {
            match op_cms.get("visible").await {
                Ok(cm) => Some(cm),
                Err(e) if status_code(&e) == Some(403) => None,
                Err(e) => panic!("get configmap as operator: {e}"),
            }
        }
    })
    .await;
    let err = op_secrets
        .list(&ListParams::default())
        .await
        .expect_err("secrets are still not granted");
    assert_eq!(status_code(&err), Some(403), "{err}");
    let err = op_cms
        .list(&ListParams::default())
        .await
        .expect_err("only get is granted, not list");
    assert_eq!(status_code(&err), Some(403), "{err}");
}

#[tokio::test]
async fn crds_are_established_and_serve_objects() {
    let env = TestEnv::shared().await;
    let client = env.client();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in [
        "pipelinerollouts.numaplane.numaproj.io",
        "monovertexrollouts.numaplane.numaproj.io",
        "isbservicerollouts.numaplane.numaproj.io",
        "numaflowcontrollerrollouts.numaplane.numaproj.io",
        "numaflowcontrollers.numaplane.numaproj.io",
        "pipelines.numaflow.numaproj.io",
        "vertices.numaflow.numaproj.io",
        "monovertices.numaflow.numaproj.io",
        "interstepbufferservices.numaflow.numaproj.io",
        "analysisruns.argoproj.io",
        "analysistemplates.argoproj.io",
        "clusteranalysistemplates.argoproj.io",
        "verticalpodautoscalers.autoscaling.k8s.io",
    ] {
        let crd = crds
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("CRD {name}: {e}"));
        let established = crd
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        assert!(established, "{name} is not Established");
    }

    let ns = env.create_namespace("crds").await;
    let pipeline_spec = json!({
        "interStepBufferServiceName": "default",
        "vertices": [
            {"name": "in", "source": {"generator": {"rpu": 5}}},
            {"name": "out", "sink": {"log": {}}}
        ],
        "edges": [{"from": "in", "to": "out"}]
    });
    let pipelines = dynamic_api(&client, &ns, "numaflow.numaproj.io", "v1alpha1", "Pipeline");
    let pipeline = create_dynamic(
        &pipelines,
        json!({
            "apiVersion": "numaflow.numaproj.io/v1alpha1",
            "kind": "Pipeline",
            "metadata": {"name": "p1"},
            "spec": pipeline_spec,
        }),
    )
    .await;
    assert_eq!(
        pipeline.data["spec"], pipeline_spec,
        "Pipeline spec not preserved"
    );

    let rollouts = dynamic_api(
        &client,
        &ns,
        "numaplane.numaproj.io",
        "v1alpha1",
        "PipelineRollout",
    );
    let rollout = create_dynamic(
        &rollouts,
        json!({
            "apiVersion": "numaplane.numaproj.io/v1alpha1",
            "kind": "PipelineRollout",
            "metadata": {"name": "pr1"},
            "spec": {"pipeline": {"spec": pipeline_spec}},
        }),
    )
    .await;
    assert_eq!(
        rollout.data["spec"]["pipeline"]["spec"], pipeline_spec,
        "PipelineRollout's pipeline spec not preserved"
    );
    // The schema is enforced: a PipelineRollout without spec.pipeline is invalid.
    let invalid: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "PipelineRollout",
        "metadata": {"name": "invalid"},
        "spec": {},
    }))
    .expect("object");
    let err = rollouts
        .create(&PostParams::default(), &invalid)
        .await
        .expect_err("spec.pipeline is required");
    assert_eq!(status_code(&err), Some(422), "{err}");

    let vpas = dynamic_api(
        &client,
        &ns,
        "autoscaling.k8s.io",
        "v1",
        "VerticalPodAutoscaler",
    );
    let vpa = create_dynamic(
        &vpas,
        json!({
            "apiVersion": "autoscaling.k8s.io/v1",
            "kind": "VerticalPodAutoscaler",
            "metadata": {"name": "vpa1"},
            "spec": {"targetRef": {"kind": "Vertex", "name": "p1-in"}},
        }),
    )
    .await;
    assert_eq!(vpa.data["spec"]["targetRef"]["name"], "p1-in");
}

fn dynamic_api(
    client: &kube::Client,
    ns: &str,
    group: &str,
    version: &str,
    kind: &str,
) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    Api::namespaced_with(client.clone(), ns, &ar)
}

async fn create_dynamic(api: &Api<DynamicObject>, obj: serde_json::Value) -> DynamicObject {
    let obj: DynamicObject = serde_json::from_value(obj).expect("object");
    let name = obj.metadata.name.clone().expect("name");
    api.create(&PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| panic!("create {name}: {e}"));
    api.get(&name)
        .await
        .unwrap_or_else(|e| panic!("get {name}: {e}"))
}

#[tokio::test]
async fn kubeconfig_files_work() {
    let env = TestEnv::shared().await;
    for (path, want_user) in [
        (env.kubeconfig_path(), None),
        (env.operator_kubeconfig_path(), Some(OPERATOR_USER)),
    ] {
        let kubeconfig = Kubeconfig::read_from(&path).expect("read kubeconfig");
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .expect("kubeconfig to config");
        assert_eq!(
            config.cluster_url.to_string().trim_end_matches('/'),
            env.apiserver_url()
        );
        let client = kube::Client::try_from(config).expect("client");
        let (user, _) = whoami(client).await;
        if let Some(want) = want_user {
            assert_eq!(user, want);
        }
    }
}

/// A private control plane: the audit log records requests, and dropping the environment stops
/// every process and removes its directory.
#[tokio::test]
async fn private_env_audit_log_and_cleanup_on_drop() {
    let audit_dir = tempfile::tempdir().expect("tempdir");
    let audit = audit_dir.path().join("audit.log");
    let env = TestEnv::start_with(TestEnvOptions {
        audit_log: Some(audit.clone()),
        ..TestEnvOptions::default()
    })
    .await
    .expect("start private control plane");
    assert_eq!(env.audit_log_path(), Some(audit.as_path()));

    let ns = env.create_namespace("audit").await;
    Api::<ConfigMap>::namespaced(env.client(), &ns)
        .create(&PostParams::default(), &configmap("audited-configmap", &[]))
        .await
        .expect("create");
    let log = std::fs::read_to_string(&audit).expect("audit log");
    let entry = log
        .lines()
        .find(|l| l.contains("audited-configmap") && l.contains("\"verb\":\"create\""))
        .unwrap_or_else(|| {
            panic!(
                "no audit entry for the create in {} lines",
                log.lines().count()
            )
        });
    assert!(entry.contains("testenv-admin"), "{entry}");

    let dir = env.dir().to_path_buf();
    let pids: Vec<u32> = std::fs::read_to_string(dir.join("pids"))
        .expect("pids file")
        .lines()
        .map(|l| l.parse().expect("pid"))
        .collect();
    assert_eq!(
        pids.len(),
        3,
        "etcd, kube-apiserver, kube-controller-manager"
    );
    assert!(pids.iter().all(|p| alive(*p)), "all processes run");
    drop(env);
    for p in pids {
        assert!(!alive(p), "process {p} survived the drop");
    }
    assert!(!dir.exists(), "{} survived the drop", dir.display());
}

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}
