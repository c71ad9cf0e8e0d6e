//! Giving the leader lease up at shutdown, so that a standby takes over at once instead of after
//! the lease expires. Done here rather than by the lease manager: its own release turns a
//! conflicting write (the lease changed meanwhile) into a panic.

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};

/// Clears the holder of lease `ns/name` if `identity` still holds it, in a write conditional on
/// the version read (a successor that took it meanwhile keeps it). Returns whether it did.
pub async fn release(
    client: &Client,
    ns: &str,
    name: &str,
    identity: &str,
) -> Result<bool, kube::Error> {
    let api: Api<Lease> = Api::namespaced(client.clone(), ns);
    let Some(lease) = api.get_opt(name).await? else {
        return Ok(false);
    };
    let holder = lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref());
    if holder != Some(identity) {
        return Ok(false);
    }
    // As client-go releases: no holder, a one-second duration, renewed now.
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
        k8s_openapi::jiff::Timestamp::now(),
    );
    let patch = serde_json::json!({
        "metadata": {"resourceVersion": lease.resource_version()},
        "spec": {"holderIdentity": null, "leaseDurationSeconds": 1, "renewTime": now},
    });
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}
