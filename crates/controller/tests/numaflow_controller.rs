//! NumaflowControllerRollout and NumaflowController on the real stack (the rendered Deployment
//! runs the real Numaflow controller), with the fixture definitions (CONTRIBUTING.md under
//! no-strategy, B.7): install,
//! upgrade, unknown version, instance IDs, trusted definitions only, pruning, self-heal, what a
//! definition may not do (kinds outside includedResources, Roles granting more than the operator
//! holds, objects someone else owns), and deletion that waits for the namespace's rollouts.

mod support;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use numaplane_api::common::Phase;
use numaplane_api::{NumaflowController, NumaflowControllerRollout, PipelineRollout};
use serde_json::{Value, json};
use std::fmt::Debug;
use std::time::Duration;
use support::fixtures::definitions;
use support::{Harness, TEST_CONFIG, condition, eventually, samples};

const NAME: &str = "numaflow-controller";
const TRACKING: &str = "numaplane.numaproj.io/tracking-id";

/// The test config plus the shipped `includedResources` (what a NumaflowController prunes).
fn config() -> String {
    format!(
        "{TEST_CONFIG}includedResources: \"group=apps,kind=Deployment;group=,kind=ConfigMap;group=,kind=ServiceAccount;group=,kind=Secret;group=,kind=Service;group=rbac.authorization.k8s.io,kind=RoleBinding;group=rbac.authorization.k8s.io,kind=Role\"\n"
    )
}

/// The operator's namespace: where definitions are trusted.
const OPERATOR_NS: &str = "numaplane-system";

/// The fixture definitions of `file_version` as version `version` (a name no other test of the
/// shared operator namespace uses), in a ConfigMap of its own.
fn definitions_as(file_version: &str, version: &str) -> Value {
    let mut cm = definitions(file_version);
    let text = cm["data"]["controller_definitions.yaml"]
        .as_str()
        .expect("definitions")
        .to_string();
    let mut outer: Value = serde_saphyr::from_str(&text).expect("outer yaml");
    outer["controllerDefinitions"][0]["version"] = version.into();
    cm["data"]["controller_definitions.yaml"] =
        serde_json::to_string(&outer).expect("json is yaml").into();
    cm["metadata"]["name"] = format!("numaflow-controller-definitions-{version}").into();
    cm
}

/// A hand-written definition of `version`.
fn custom_definition(version: &str, full_spec: &str) -> Value {
    let outer = json!({"controllerDefinitions": [{"version": version, "fullSpec": full_spec}]});
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {
            "name": format!("numaflow-controller-definitions-{version}"),
            "labels": {"numaplane.numaproj.io/config": "numaflow-controller-definitions"}
        },
        "data": {"controller_definitions.yaml": serde_json::to_string(&outer).expect("yaml")}
    })
}

/// Server-side applies a definitions ConfigMap in namespace `ns`.
async fn publish(h: &Harness, ns: &str, mut cm: Value) {
    cm["metadata"]["namespace"] = ns.into();
    let name = cm["metadata"]["name"].as_str().expect("name").to_string();
    Api::<ConfigMap>::namespaced(h.client.clone(), ns)
        .patch(
            &name,
            &PatchParams::apply("test-user").force(),
            &Patch::Apply(&cm),
        )
        .await
        .expect("definitions ConfigMap");
}

fn rollout(version: &str, instance_id: Option<&str>) -> Value {
    let mut controller = json!({"version": version});
    if let Some(id) = instance_id {
        controller["instanceID"] = id.into();
    }
    json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "NumaflowControllerRollout",
        "metadata": {"name": NAME},
        "spec": {"controller": controller}
    })
}

/// Deployed, its generation observed, and its controller healthy.
fn healthy(r: Option<&NumaflowControllerRollout>) -> Option<NumaflowControllerRollout> {
    let r = r?;
    let st = r.status.as_ref()?;
    (st.status.phase == Phase::Deployed
        && st.status.observed_generation == r.metadata.generation?
        && condition(&st.status.conditions, "ChildResourcesHealthy")?.0 == "True")
        .then(|| r.clone())
}

fn image(d: &Deployment) -> String {
    d.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default()
}

async fn set_version(h: &Harness, version: &str) {
    h.merge::<NumaflowControllerRollout>(
        NAME,
        json!({"spec": {"controller": {"version": version}}}),
    )
    .await;
}

/// Names of the objects of a kind carrying the tracking label of `nc`, with their owners.
async fn tracked<K>(h: &Harness, nc: &str) -> Vec<(String, Vec<String>)>
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + Debug
        + serde::de::DeserializeOwned,
{
    let mut out: Vec<(String, Vec<String>)> = h
        .api::<K>()
        .list(&ListParams::default().labels(&format!("{TRACKING}={nc}")))
        .await
        .expect("list")
        .items
        .iter()
        .map(|o| {
            (
                o.name_any(),
                o.owner_references().iter().map(|r| r.uid.clone()).collect(),
            )
        })
        .collect();
    out.sort();
    out
}

async fn event_reasons(h: &Harness, kind: &str) -> Vec<String> {
    let events: Api<Event> = Api::namespaced(h.client.clone(), &h.ns);
    events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some(kind))
        .filter_map(|e| e.reason)
        .collect()
}

#[tokio::test]
async fn install_upgrade_and_unknown_version() {
    // 1.8.1 and 1.7.5 are defined in the operator's namespace (see `support::install_numaflow`).
    let h = Harness::start_real_with_config("nc-upgrade", &config()).await;

    // Install 1.8.1.
    h.apply::<NumaflowControllerRollout>(rollout("1.8.1", None))
        .await;
    let r = h.until("rollout deployed and healthy", NAME, healthy).await;
    let st = &r.status.as_ref().expect("status").status;
    assert_eq!(
        condition(&st.conditions, "ChildResourceDeployed").map(|c| c.0),
        Some("True".into())
    );
    assert_eq!(
        condition(&st.conditions, "PausingPipelines"),
        Some(("False".into(), "NoPause".into(), "no need for pause".into()))
    );
    assert!(
        r.finalizers()
            .contains(&"numaplane.numaproj.io/numaplane-controller".to_string())
    );
    let d: Deployment = h
        .api()
        .get("numaflow-controller")
        .await
        .expect("deployment");
    assert_eq!(image(&d), "quay.io/numaproj/numaflow:v1.8.1");

    // The NumaflowController: same name, the rollout's spec, owned by it; healthy itself.
    let nc: NumaflowController = h.api().get(NAME).await.expect("NumaflowController");
    assert_eq!(nc.spec.version, "1.8.1");
    assert_eq!(nc.spec.instance_id, None);
    let owner = &nc.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller, Some(&owner.uid)),
        ("NumaflowControllerRollout", Some(true), r.uid().as_ref())
    );
    // Labelled like every other child: its rollout and its upgrade state.
    assert_eq!(
        nc.labels()
            .get("numaplane.numaproj.io/parent-rollout-name")
            .map(String::as_str),
        Some(NAME)
    );
    assert_eq!(
        nc.labels()
            .get("numaplane.numaproj.io/upgrade-state")
            .map(String::as_str),
        Some("promoted")
    );
    let nc_st = &nc.status.as_ref().expect("nc status").status;
    assert_eq!(nc_st.phase, Phase::Deployed);
    assert_eq!(
        condition(&nc_st.conditions, "ChildResourcesHealthy").map(|c| c.0),
        Some("True".into())
    );

    // Every rendered object is labelled and owned by the NumaflowController.
    let nc_uid = nc.uid().expect("uid");
    let counts = [
        tracked::<ServiceAccount>(&h, NAME).await,
        tracked::<Role>(&h, NAME).await,
        tracked::<RoleBinding>(&h, NAME).await,
        tracked::<ConfigMap>(&h, NAME).await,
        tracked::<Secret>(&h, NAME).await,
        tracked::<Service>(&h, NAME).await,
        tracked::<Deployment>(&h, NAME).await,
    ];
    assert_eq!(
        counts.iter().map(Vec::len).collect::<Vec<_>>(),
        vec![3, 4, 4, 6, 2, 2, 3]
    );
    assert!(
        counts
            .iter()
            .flatten()
            .all(|(_, owners)| owners == &vec![nc_uid.clone()]),
        "{counts:?}"
    );
    let nfcr_events = event_reasons(&h, "NumaflowControllerRollout").await;
    assert!(
        nfcr_events.contains(&"ReconcilationSuccessful".to_string()),
        "{nfcr_events:?}"
    );
    let nc_events = event_reasons(&h, "NumaflowController").await;
    assert!(
        nc_events.contains(&"ReconcileSuccess".to_string()),
        "{nc_events:?}"
    );

    // Quiet when nothing changes: no writes to the rollout or its controller.
    let (r_rv, nc_rv) = (r.resource_version(), nc.resource_version());
    h.stays::<NumaflowControllerRollout, _>(
        "no rollout writes while idle",
        NAME,
        Duration::from_secs(3),
        |o| o.is_some_and(|o| o.resource_version() == r_rv),
    )
    .await;
    let nc_now: NumaflowController = h.api().get(NAME).await.expect("nc");
    assert_eq!(
        nc_now.resource_version(),
        nc_rv,
        "no NumaflowController writes while idle"
    );

    // Upgrade to 1.7.5: applied directly under no-strategy.
    set_version(&h, "1.7.5").await;
    h.until::<Deployment, _, _>("image v1.7.5", "numaflow-controller", |d| {
        (image(d?) == "quay.io/numaproj/numaflow:v1.7.5").then_some(())
    })
    .await;
    h.until("healthy on 1.7.5", NAME, healthy).await;
    let nc: NumaflowController = h.api().get(NAME).await.expect("nc");
    assert_eq!(nc.spec.version, "1.7.5");

    // An unknown version: nothing applied, the running controller untouched, reported unhealthy.
    set_version(&h, "99.99.99").await;
    let r = h
        .until::<NumaflowControllerRollout, _, _>("unhealthy with reason Failed", NAME, |r| {
            let r = r?;
            let st = &r.status.as_ref()?.status;
            let (s, reason, _) = condition(&st.conditions, "ChildResourcesHealthy")?;
            (st.observed_generation == r.metadata.generation? && s == "False" && reason == "Failed")
                .then(|| r.clone())
        })
        .await;
    let st = &r.status.as_ref().expect("status").status;
    assert_eq!(st.phase, Phase::Deployed, "the rollout did its part");
    let msg = condition(&st.conditions, "ChildResourcesHealthy")
        .expect("condition")
        .2;
    assert!(
        msg.contains("99.99.99") && msg.contains("searched namespaces: numaplane-system)"),
        "{msg}"
    );
    let nc: NumaflowController = h.api().get(NAME).await.expect("nc");
    let nc_st = &nc.status.as_ref().expect("nc status").status;
    assert_eq!(nc_st.phase, Phase::Failed);
    assert!(nc_st.message.contains("99.99.99"), "{}", nc_st.message);
    assert_eq!(
        condition(&nc_st.conditions, "ChildResourcesHealthy").map(|c| (c.0, c.1)),
        Some(("False".into(), "Failed".into()))
    );
    h.stays::<Deployment, _>(
        "Deployment unchanged",
        "numaflow-controller",
        Duration::from_secs(3),
        |d| d.is_some_and(|d| image(d) == "quay.io/numaproj/numaflow:v1.7.5"),
    )
    .await;
    assert!(
        event_reasons(&h, "NumaflowController")
            .await
            .contains(&"ReconcileFailed".to_string())
    );

    // Back to a known version.
    set_version(&h, "1.8.1").await;
    h.until::<Deployment, _, _>("image v1.8.1 again", "numaflow-controller", |d| {
        (image(d?) == "quay.io/numaproj/numaflow:v1.8.1").then_some(())
    })
    .await;
    let r = h.until("healthy on 1.8.1 again", NAME, healthy).await;
    // Each version change is an attempt in the history, applied in place.
    use numaplane_api::common::UpgradeOutcome::{AppliedDirectly, Created};
    use numaplane_api::common::UpgradeStrategy::DirectApply;
    let st = &r.status.as_ref().expect("status").status;
    let applied = (NAME.to_string(), DirectApply, Some(AppliedDirectly));
    assert_eq!(
        support::scenario::history_outcomes(st),
        vec![
            (NAME.to_string(), DirectApply, Some(Created)),
            applied.clone(),
            applied.clone(),
            applied
        ]
    );
    for a in &st.upgrade_history[1..] {
        assert_eq!(a.changed_fields, vec!["spec.controller.version"], "{a:?}");
    }
    h.assert_invariants().await;
}

#[tokio::test]
async fn instance_id_and_trusted_definitions() {
    let h = Harness::start_real_with_config("nc-instance", &config()).await;
    let version = "1.6.0-instance";

    // No definition yet: failed, naming the version.
    h.apply::<NumaflowControllerRollout>(rollout(version, Some("abc")))
        .await;
    h.until::<NumaflowController, _, _>("NumaflowController failed", NAME, |nc| {
        let st = &nc?.status.as_ref()?.status;
        (st.phase == Phase::Failed && st.message.contains(version)).then_some(())
    })
    .await;

    // A definition in the NumaflowController's own namespace is written by whoever may create
    // ConfigMaps there: not trusted, so still failed, saying it was ignored; nothing rendered.
    publish(&h, &h.ns, definitions_as("1.6.0", version)).await;
    let ignored = format!("ignored the definitions in namespace {}", h.ns);
    h.until::<NumaflowController, _, _>("the ignored definition named", NAME, |nc| {
        let st = &nc?.status.as_ref()?.status;
        (st.phase == Phase::Failed && st.message.contains(&ignored)).then_some(())
    })
    .await;
    h.stays::<Deployment, _>(
        "nothing rendered from an untrusted definition",
        "numaflow-controller-abc",
        Duration::from_secs(3),
        |d| d.is_none(),
    )
    .await;

    // Once the controller config lists the namespace, its definitions are used (at once: the
    // config is re-read live).
    std::fs::write(
        &h.config_file,
        format!(
            "{}numaflowControllerDefinitionsNamespaces: [{}]\n",
            config(),
            h.ns
        ),
    )
    .expect("write config");
    h.until("healthy once the namespace is trusted", NAME, healthy)
        .await;

    // Names carry the suffix, the config the ID.
    let d: Deployment = h
        .api()
        .get("numaflow-controller-abc")
        .await
        .expect("suffixed deployment");
    assert_eq!(image(&d), "quay.io/numaproj/numaflow:v1.6.0");
    assert_eq!(d.labels()["app.kubernetes.io/instance"], "abc");
    assert_eq!(
        d.spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|s| s.service_account_name.as_deref()),
        Some("numaflow-sa-abc"),
        "the suffix is filled into values inside the objects too"
    );
    assert!(
        h.api::<Deployment>()
            .get_opt("numaflow-controller")
            .await
            .expect("get")
            .is_none()
    );
    let cfg: ConfigMap = h
        .api()
        .get("numaflow-controller-config-abc")
        .await
        .expect("suffixed config");
    let text = cfg
        .data
        .as_ref()
        .and_then(|d| d.get("controller-config.yaml"))
        .cloned()
        .unwrap_or_default();
    assert!(text.contains("instance: \"abc\""), "{text}");

    // A new ID renames everything: the new objects are created, the old ones pruned.
    h.merge::<NumaflowControllerRollout>(
        NAME,
        json!({"spec": {"controller": {"instanceID": "def"}}}),
    )
    .await;
    h.until::<Deployment, _, _>("renamed deployment", "numaflow-controller-def", |d| {
        d.map(|_| ())
    })
    .await;
    h.until::<Deployment, _, _>("old deployment pruned", "numaflow-controller-abc", |d| {
        d.is_none().then_some(())
    })
    .await;
    h.until::<ConfigMap, _, _>("old config pruned", "numaflow-controller-config-abc", |c| {
        c.is_none().then_some(())
    })
    .await;
    h.until("healthy with the new ID", NAME, healthy).await;
    let names: Vec<String> = tracked::<ServiceAccount>(&h, NAME)
        .await
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        names,
        vec![
            "numaflow-dex-server-def",
            "numaflow-sa-def",
            "numaflow-server-sa-def"
        ]
    );
    h.assert_invariants().await;
}

/// Removes the YAML document of `name` from a definitions ConfigMap and applies `edit` to the
/// rest of the manifest text.
fn edit_definition(mut cm: Value, drop_name: &str, edit: impl Fn(&str) -> String) -> Value {
    let text = cm["data"]["controller_definitions.yaml"]
        .as_str()
        .expect("definitions")
        .to_string();
    let mut outer: Value = serde_saphyr::from_str(&text).expect("outer yaml");
    let spec = outer["controllerDefinitions"][0]["fullSpec"]
        .as_str()
        .expect("fullSpec")
        .to_string();
    let docs: Vec<&str> = spec
        .split("\n---\n")
        // `metadata.name` sits at two spaces; references to the object are indented deeper.
        .filter(|d| !d.contains(&format!("\n  name: {drop_name}{{{{ .InstanceSuffix }}}}")))
        .collect();
    assert_eq!(
        docs.len(),
        spec.split("\n---\n").count() - 1,
        "exactly one document dropped"
    );
    outer["controllerDefinitions"][0]["fullSpec"] = edit(&docs.join("\n---\n")).into();
    cm["data"]["controller_definitions.yaml"] =
        serde_json::to_string(&outer).expect("json is yaml").into();
    cm
}

#[tokio::test]
async fn self_heal_prune_and_recreate() {
    let mut h = Harness::start_real_with_config("nc-heal", &config()).await;
    // A version of its own: this test edits its definition.
    let version = "1.8.1-heal";
    publish(&h, OPERATOR_NS, definitions_as("1.8.1", version)).await;
    h.apply::<NumaflowControllerRollout>(rollout(version, None))
        .await;
    h.until("rollout healthy", NAME, healthy).await;

    // Hand edits of rendered fields are reverted.
    h.merge::<Deployment>(
        "numaflow-controller",
        json!({"spec": {"template": {"spec": {"containers": [
            {"name": "controller-manager", "image": "quay.io/numaproj/numaflow:v0.0.1"}
        ]}}}}),
    )
    .await;
    h.until::<Deployment, _, _>("image edit reverted", "numaflow-controller", |d| {
        (image(d?) == "quay.io/numaproj/numaflow:v1.8.1").then_some(())
    })
    .await;
    h.merge::<ConfigMap>(
        "numaflow-cmd-params-config",
        json!({"data": {"namespaced": "false"}}),
    )
    .await;
    h.until::<ConfigMap, _, _>("config edit reverted", "numaflow-cmd-params-config", |c| {
        (c?.data.as_ref()?.get("namespaced")? == "true").then_some(())
    })
    .await;

    // A rendered object deleted by hand comes back.
    h.api::<ServiceAccount>()
        .delete("numaflow-sa", &DeleteParams::default())
        .await
        .expect("delete service account");
    h.until::<ServiceAccount, _, _>("service account recreated", "numaflow-sa", |s| {
        s.map(|_| ())
    })
    .await;

    // An object with our label but not owned by the NumaflowController is never pruned.
    h.apply::<ConfigMap>(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "not-ours", "labels": {TRACKING: NAME}},
        "data": {"a": "b"}
    }))
    .await;

    // Edit the definition: drop one ConfigMap and change the Deployment's (immutable) selector.
    let old_uid = h
        .api::<Deployment>()
        .get("numaflow-controller")
        .await
        .expect("deployment")
        .uid();
    let edited = edit_definition(
        definitions_as("1.8.1", version),
        "numaflow-server-metrics-proxy-config",
        |spec| {
            let selector = "  selector:\n    matchLabels:\n      app.kubernetes.io/component: controller-manager\n";
            let template = "  template:\n    metadata:\n      labels:\n        app.kubernetes.io/component: controller-manager\n";
            assert_eq!(
                (
                    spec.matches(selector).count(),
                    spec.matches(template).count()
                ),
                (1, 1)
            );
            spec.replace(selector, &format!("{selector}      extra: selector\n"))
                .replace(template, &format!("{template}        extra: selector\n"))
        },
    );
    publish(&h, OPERATOR_NS, edited).await;
    let cms: Api<ConfigMap> = h.api();
    h.until::<ConfigMap, _, _>(
        "dropped object pruned",
        "numaflow-server-metrics-proxy-config",
        |c| c.is_none().then_some(()),
    )
    .await;
    let d = h
        .until::<Deployment, _, _>(
            "deployment recreated with the new selector",
            "numaflow-controller",
            |d| {
                let d = d?;
                let sel = d.spec.as_ref()?.selector.match_labels.as_ref()?;
                (d.uid() != old_uid && sel.get("extra").map(String::as_str) == Some("selector"))
                    .then(|| d.clone())
            },
        )
        .await;
    assert_eq!(image(&d), "quay.io/numaproj/numaflow:v1.8.1");
    h.until("healthy after the edit", NAME, healthy).await;
    assert!(
        cms.get_opt("not-ours").await.expect("get").is_some(),
        "an object we don't own survives pruning"
    );

    // A restart applies again only what no longer holds its rendering: here the one object
    // edited while no operator ran, which is reverted.
    let applies = |h: &Harness| -> f64 {
        samples(
            &h.metrics.encode(),
            "numaflow_controller_kubectl_execution_total",
        )
        .iter()
        .map(|(_, v)| v)
        .sum()
    };
    h.stop_operator().await;
    let before = applies(&h);
    h.merge::<ConfigMap>(
        "numaflow-cmd-params-config",
        json!({"data": {"namespaced": "false"}}),
    )
    .await;
    h.restart_operator().await;
    h.until::<ConfigMap, _, _>(
        "edit made while stopped reverted",
        "numaflow-cmd-params-config",
        |c| (c?.data.as_ref()?.get("namespaced")? == "true").then_some(()),
    )
    .await;
    h.until("healthy after the restart", NAME, healthy).await;
    eventually("the revert counted", || async {
        (applies(&h) > before).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        applies(&h) - before,
        1.0,
        "objects applied again after the restart besides the edited one"
    );
    h.assert_invariants().await;
}

/// Waits until NumaflowController `name` has failed with `what` in its status message.
async fn failed_saying(h: &Harness, name: &str, what: &str) -> NumaflowController {
    h.until::<NumaflowController, _, _>(what, name, |nc| {
        let nc = nc?;
        let st = &nc.status.as_ref()?.status;
        (st.phase == Phase::Failed
            && st.observed_generation == nc.metadata.generation?
            && st.message.contains(what))
        .then(|| nc.clone())
    })
    .await
}

#[tokio::test]
async fn a_definition_may_not_widen_what_the_operator_does() {
    let h = Harness::start_real_with_config("nc-refuse", &config()).await;
    let nc = |version: &str| {
        json!({
            "apiVersion": "numaplane.numaproj.io/v1alpha1",
            "kind": "NumaflowController",
            "metadata": {"name": "probe"},
            "spec": {"version": version}
        })
    };

    // A kind outside includedResources refuses the whole definition: not even the ConfigMap
    // before it is applied.
    publish(
        &h,
        OPERATOR_NS,
        custom_definition(
            "refuse-kind",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: probe-config\ndata:\n  a: b\n---\n\
             apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: take-over\n\
             roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}\n\
             subjects: [{kind: Group, name: system:authenticated, apiGroup: rbac.authorization.k8s.io}]\n",
        ),
    )
    .await;
    h.apply::<NumaflowController>(nc("refuse-kind")).await;
    let refused = failed_saying(
        &h,
        "probe",
        "ClusterRoleBinding \"take-over\" (API group rbac.authorization.k8s.io) is not a kind includedResources allows",
    )
    .await;
    let st = &refused.status.as_ref().expect("status").status;
    assert_eq!(
        condition(&st.conditions, "ChildResourcesHealthy").map(|c| (c.0, c.1)),
        Some(("False".into(), "Failed".into()))
    );
    let events = h.events_about("probe").await;
    assert!(
        events
            .iter()
            .any(|e| e.reason.as_deref() == Some("ReconcileFailed")
                && e.note.as_deref().is_some_and(|n| n.contains("take-over"))),
        "{events:?}"
    );
    h.stays::<ConfigMap, _>(
        "nothing of a refused definition applied",
        "probe-config",
        Duration::from_secs(2),
        |c| c.is_none(),
    )
    .await;

    // A Role granting what the operator doesn't hold itself is refused by the API server (the
    // operator has no `escalate`): the NumaflowController fails saying so.
    publish(
        &h,
        OPERATOR_NS,
        custom_definition(
            "wider-role",
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: probe-wider\n\
             rules:\n  - apiGroups: [networking.k8s.io]\n    resources: [networkpolicies]\n    verbs: [create]\n",
        ),
    )
    .await;
    h.merge::<NumaflowController>("probe", json!({"spec": {"version": "wider-role"}}))
        .await;
    failed_saying(
        &h,
        "probe",
        "attempting to grant RBAC permissions not currently held",
    )
    .await;
    assert!(
        h.api::<Role>()
            .get_opt("probe-wider")
            .await
            .expect("get")
            .is_none()
    );

    // An object of a rendered name that the NumaflowController doesn't own is neither
    // overwritten nor (see `self_heal_prune_and_recreate`) pruned.
    let squatter = h
        .apply::<ConfigMap>(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "probe-squatted"},
            "data": {"mine": "yes"}
        }))
        .await;
    publish(
        &h,
        OPERATOR_NS,
        custom_definition(
            "squatted",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: probe-squatted\ndata:\n  a: b\n",
        ),
    )
    .await;
    h.merge::<NumaflowController>("probe", json!({"spec": {"version": "squatted"}}))
        .await;
    failed_saying(
        &h,
        "probe",
        &format!(
            "ConfigMap probe-squatted exists in namespace {} and is not owned by NumaflowController probe",
            h.ns
        ),
    )
    .await;
    h.stays::<ConfigMap, _>(
        "someone else's object untouched",
        "probe-squatted",
        Duration::from_secs(2),
        |c| {
            c.is_some_and(|c| {
                c.resource_version() == squatter.resource_version()
                    && c.data == squatter.data
                    && c.owner_references().is_empty()
            })
        },
    )
    .await;
    h.assert_invariants().await;
}

#[tokio::test]
async fn deletion_waits_for_pipeline_rollouts() {
    let h = Harness::start_real_with_config("nc-delete", &config()).await;
    h.apply::<NumaflowControllerRollout>(rollout("1.8.1", None))
        .await;
    h.until("rollout healthy", NAME, healthy).await;
    h.apply::<PipelineRollout>(json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "PipelineRollout",
        "metadata": {"name": "pr"},
        "spec": {"pipeline": {"spec": {
            "interStepBufferServiceName": "isb",
            "vertices": [{"name": "in", "source": {"generator": {}}}, {"name": "out", "sink": {"log": {}}}],
            "edges": [{"from": "in", "to": "out"}]
        }}}
    }))
    .await;

    // Deleting waits while the PipelineRollout exists; the Numaflow controller keeps running.
    h.api::<NumaflowControllerRollout>()
        .delete(NAME, &DeleteParams::default())
        .await
        .expect("delete rollout");
    h.until::<NumaflowControllerRollout, _, _>("deletion reported as waiting", NAME, |r| {
        let r = r?;
        (r.meta().deletion_timestamp.is_some()
            && r.status
                .as_ref()?
                .status
                .message
                .contains("PipelineRollouts pr"))
        .then_some(())
    })
    .await;
    h.stays::<NumaflowControllerRollout, _>(
        "rollout kept while a PipelineRollout exists",
        NAME,
        Duration::from_secs(6),
        |r| r.is_some(),
    )
    .await;
    assert!(
        h.api::<Deployment>()
            .get_opt("numaflow-controller")
            .await
            .expect("get")
            .is_some_and(|d| d.meta().deletion_timestamp.is_none())
    );
    assert!(
        h.api::<NumaflowController>()
            .get_opt(NAME)
            .await
            .expect("get")
            .is_some()
    );
    assert!(
        event_reasons(&h, "NumaflowControllerRollout")
            .await
            .contains(&"Deleting".to_string())
    );

    // Once the PipelineRollout is gone, everything goes.
    h.api::<PipelineRollout>()
        .delete("pr", &DeleteParams::default())
        .await
        .expect("delete pipeline rollout");
    h.until::<NumaflowControllerRollout, _, _>("rollout gone", NAME, |r| r.is_none().then_some(()))
        .await;
    h.until::<NumaflowController, _, _>("NumaflowController gone", NAME, |nc| {
        nc.is_none().then_some(())
    })
    .await;
    h.until::<Deployment, _, _>("Deployment gone", "numaflow-controller", |d| {
        d.is_none().then_some(())
    })
    .await;
    eventually("rendered objects garbage-collected", || async {
        tracked::<ConfigMap>(&h, NAME)
            .await
            .is_empty()
            .then_some(())
    })
    .await;
    h.assert_invariants().await;
}
