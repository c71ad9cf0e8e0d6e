//! What the real API server makes of our CRDs: the reference samples are accepted unchanged and
//! read back without loss, and the NumaflowControllerRollout name rule is enforced.

use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use numaplane_testenv::TestEnv;
use serde_json::Value;
use std::path::Path;

fn samples() -> Vec<Value> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/reference-samples");
    let mut out = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("reference samples")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("read sample");
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("parse sample");
        out.extend(docs.into_iter().filter(|d| d["apiVersion"].is_string()));
    }
    out
}

fn api_for(client: &kube::Client, ns: &str, doc: &Value) -> Api<DynamicObject> {
    let (group, version) = doc["apiVersion"]
        .as_str()
        .and_then(|av| av.split_once('/'))
        .unwrap_or(("", doc["apiVersion"].as_str().unwrap_or("v1")));
    let kind = doc["kind"].as_str().expect("kind");
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    Api::namespaced_with(client.clone(), ns, &ar)
}

fn strip_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, v| !v.is_null());
            m.values_mut().for_each(strip_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

#[tokio::test]
async fn reference_samples_are_accepted_and_kept_verbatim() {
    let env = TestEnv::shared().await;
    let client = env.client();
    let ns = env.create_namespace("samples").await;
    let docs = samples();
    let numaplane_kinds = docs
        .iter()
        .filter(|d| d["apiVersion"] == numaplane_api::API_VERSION)
        .count();
    assert_eq!(
        numaplane_kinds, 5,
        "the reference samples hold all five kinds"
    );
    for mut doc in docs {
        doc["metadata"]["namespace"] = Value::String(ns.clone());
        let name = doc["metadata"]["name"].as_str().expect("name").to_string();
        let api = api_for(&client, &ns, &doc);
        let obj: DynamicObject = serde_json::from_value(doc.clone()).expect("dynamic object");
        let created = api
            .create(&PostParams::default(), &obj)
            .await
            .unwrap_or_else(|e| panic!("{} {name} refused: {e}", doc["kind"]));
        // Nothing the user wrote is pruned or defaulted away by our schemas.
        let mut want = doc.clone();
        strip_nulls(&mut want);
        // (Our optional fields are nullable, so the server keeps a written `null`; compare
        // without nulls, as every reader treats null and absent alike.)
        let mut have = created.data.clone();
        strip_nulls(&mut have);
        for key in ["spec", "data"] {
            if let Some(w) = want.get(key) {
                assert_eq!(
                    have.get(key),
                    Some(w),
                    "{} {name}: {key} changed by the API server",
                    doc["kind"]
                );
            }
        }
    }
}

#[tokio::test]
async fn numaflow_controller_rollout_name_rule_is_enforced() {
    let env = TestEnv::shared().await;
    let client = env.client();
    let ns = env.create_namespace("celrule").await;
    let doc = serde_json::json!({
        "apiVersion": numaplane_api::API_VERSION,
        "kind": "NumaflowControllerRollout",
        "metadata": {"name": "my-controller", "namespace": ns},
        "spec": {"controller": {"version": "1.8.1"}}
    });
    let api = api_for(&client, &ns, &doc);
    let err = api
        .patch(
            "my-controller",
            &PatchParams::apply("test"),
            &Patch::Apply(&doc),
        )
        .await
        .expect_err("a name not starting with numaflow-controller must be refused");
    let msg = err.to_string();
    assert!(
        msg.contains("The metadata name must start with 'numaflow-controller'"),
        "unexpected refusal: {msg}"
    );
    let mut ok = doc.clone();
    ok["metadata"]["name"] = "numaflow-controller-a".into();
    api.patch(
        "numaflow-controller-a",
        &PatchParams::apply("test"),
        &Patch::Apply(&ok),
    )
    .await
    .expect("a name starting with numaflow-controller is accepted");
}

/// `instanceID` becomes part of object names, labels and the Numaflow controller's config: the
/// CRDs accept only an empty one or a DNS label, so a value carrying YAML (a newline and `---`)
/// never reaches a definition.
#[tokio::test]
async fn instance_ids_must_be_dns_labels() {
    let env = TestEnv::shared().await;
    let client = env.client();
    let ns = env.create_namespace("instance-id").await;
    let doc = |kind: &str, id: &str| {
        let spec = serde_json::json!({"version": "1.8.1", "instanceID": id});
        serde_json::json!({
            "apiVersion": numaplane_api::API_VERSION,
            "kind": kind,
            "metadata": {"name": "numaflow-controller", "namespace": ns},
            "spec": if kind == "NumaflowController" {
                spec
            } else {
                serde_json::json!({"controller": spec})
            }
        })
    };
    let too_long = "a".repeat(64);
    let injected = "x\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding";
    for (kind, field) in [
        ("NumaflowController", "spec.instanceID"),
        ("NumaflowControllerRollout", "spec.controller.instanceID"),
    ] {
        for bad in [injected, "ABC", "a_b", "-a", "a.b", too_long.as_str()] {
            let d = doc(kind, bad);
            let err = api_for(&client, &ns, &d)
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(d.clone()).expect("object"),
                )
                .await
                .expect_err("an instance ID that is not a DNS label is refused");
            match err {
                kube::Error::Api(s) => {
                    assert_eq!(s.code, 422, "{kind} {bad:?}: {s:?}");
                    assert!(s.message.contains(field), "{kind} {bad:?}: {}", s.message);
                }
                other => panic!("{kind} {bad:?}: unexpected error {other}"),
            }
        }
        for good in ["", "abc", "blue-3", &"a".repeat(63)] {
            let d = doc(kind, good);
            let api = api_for(&client, &ns, &d);
            api.patch(
                "numaflow-controller",
                &PatchParams::apply("test").force(),
                &Patch::Apply(&d),
            )
            .await
            .unwrap_or_else(|e| panic!("{kind} instanceID {good:?} accepted: {e}"));
        }
    }
}
