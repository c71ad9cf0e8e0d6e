//! Shared by the plugin's integration tests: objects written with the admin client as the
//! operator would have left them.

#![allow(dead_code)]

use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::fmt::Debug;

/// Creates an object, then writes its status through the status subresource.
pub async fn create<K>(client: &Client, ns: &str, manifest: Value, status: Option<Value>) -> K
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let obj: K = serde_json::from_value(manifest).expect("manifest");
    let created = api
        .create(&PostParams::default(), &obj)
        .await
        .expect("create");
    match status {
        Some(status) => {
            let name = created.meta().name.clone().expect("name");
            api.patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await
            .expect("patch status")
        }
        None => created,
    }
}

pub fn pipeline_rollout(name: &str) -> Value {
    json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "PipelineRollout",
        "metadata": {"name": name},
        "spec": {"pipeline": {"spec": {
            "interStepBufferServiceName": "default",
            "vertices": [{"name": "in", "source": {"generator": {}}}, {"name": "out", "sink": {"log": {}}}],
            "edges": [{"from": "in", "to": "out"}]
        }}}
    })
}

pub fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({"type": type_, "status": status, "reason": reason, "message": message,
           "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1})
}

pub fn deployed_status(generation: i64) -> Value {
    json!({
        "phase": "Deployed", "message": "Deployed", "observedGeneration": generation,
        "conditions": [
            condition("ChildResourceDeployed", "True", "Successful", "Successful"),
            condition("ChildResourcesHealthy", "True", "Successful", "Successful"),
        ]
    })
}
