//! Caches of the objects NumaflowControllers render, watched by the `tracking-id` label: a hand
//! edit or deletion wakes the owning NumaflowController, and a quiet pass compares these caches
//! with what it last applied instead of re-applying everything.

use super::render::ObjKey;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

/// What a live object looked like, minus what others write all the time (status,
/// resourceVersion, managedFields): two equal fingerprints mean nobody changed the object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen {
    pub resource_version: u64,
    pub fingerprint: u64,
}

/// The cached state of a rendered object.
#[derive(Debug, PartialEq, Eq)]
pub enum Cached {
    /// Not a kind we watch: only a full pass checks it.
    Unwatched,
    Missing,
    Present(Seen),
}

#[derive(Clone)]
pub struct OwnedStores {
    pub deployments: Store<Deployment>,
    pub configmaps: Store<ConfigMap>,
    pub serviceaccounts: Store<ServiceAccount>,
    pub roles: Store<Role>,
    pub rolebindings: Store<RoleBinding>,
    pub services: Store<Service>,
    pub secrets: Store<Secret>,
}

/// The kinds watched, as (group, kind).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Watched {
    Deployment,
    ConfigMap,
    ServiceAccount,
    Role,
    RoleBinding,
    Service,
    Secret,
}

impl Watched {
    fn of(key: &ObjKey) -> Option<Self> {
        Some(match (key.group.as_str(), key.kind.as_str()) {
            ("apps", "Deployment") => Self::Deployment,
            ("", "ConfigMap") => Self::ConfigMap,
            ("", "ServiceAccount") => Self::ServiceAccount,
            ("rbac.authorization.k8s.io", "Role") => Self::Role,
            ("rbac.authorization.k8s.io", "RoleBinding") => Self::RoleBinding,
            ("", "Service") => Self::Service,
            ("", "Secret") => Self::Secret,
            _ => return None,
        })
    }
}

fn rv_of(v: Option<&str>) -> u64 {
    v.and_then(|s| s.parse().ok()).unwrap_or_default()
}

/// Fingerprint of a typed object. Both the cache and the result of an apply go through the
/// same typed form, so they agree whenever the object is the same.
fn seen_typed<K: Resource + Serialize>(obj: &K) -> Option<Seen> {
    let mut v = serde_json::to_value(obj).ok()?;
    let obj_map = v.as_object_mut()?;
    obj_map.remove("status");
    if let Some(meta) = obj_map.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
        meta.remove("managedFields");
    }
    let mut h = DefaultHasher::new();
    v.to_string().hash(&mut h);
    Some(Seen {
        resource_version: rv_of(obj.meta().resource_version.as_deref()),
        fingerprint: h.finish(),
    })
}

fn seen_from_value<K: Resource + Serialize + DeserializeOwned>(v: &Value) -> Option<Seen> {
    seen_typed(&serde_json::from_value::<K>(v.clone()).ok()?)
}

fn cached_in<K>(store: &Store<K>, ns: &str, name: &str) -> Cached
where
    K: Resource<DynamicType = ()> + Serialize + Clone + 'static,
{
    match store.get(&ObjectRef::new(name).within(ns)) {
        Some(obj) => seen_typed(&*obj).map_or(Cached::Missing, Cached::Present),
        None => Cached::Missing,
    }
}

fn value_in<K>(store: &Store<K>, ns: &str, name: &str) -> Option<Value>
where
    K: Resource<DynamicType = ()> + Serialize + Clone + 'static,
{
    serde_json::to_value(&*store.get(&ObjectRef::new(name).within(ns))?).ok()
}

impl OwnedStores {
    /// The cached copy of the rendered object `key` in `ns`, as JSON; `None` when missing or
    /// not a kind we watch.
    pub fn cached_value(&self, key: &ObjKey, ns: &str) -> Option<Value> {
        let n = key.name.as_str();
        match Watched::of(key)? {
            Watched::Deployment => value_in(&self.deployments, ns, n),
            Watched::ConfigMap => value_in(&self.configmaps, ns, n),
            Watched::ServiceAccount => value_in(&self.serviceaccounts, ns, n),
            Watched::Role => value_in(&self.roles, ns, n),
            Watched::RoleBinding => value_in(&self.rolebindings, ns, n),
            Watched::Service => value_in(&self.services, ns, n),
            Watched::Secret => value_in(&self.secrets, ns, n),
        }
    }

    /// The cached state of the rendered object `key` in `ns`.
    pub fn cached(&self, key: &ObjKey, ns: &str) -> Cached {
        let n = key.name.as_str();
        match Watched::of(key) {
            None => Cached::Unwatched,
            Some(Watched::Deployment) => cached_in(&self.deployments, ns, n),
            Some(Watched::ConfigMap) => cached_in(&self.configmaps, ns, n),
            Some(Watched::ServiceAccount) => cached_in(&self.serviceaccounts, ns, n),
            Some(Watched::Role) => cached_in(&self.roles, ns, n),
            Some(Watched::RoleBinding) => cached_in(&self.rolebindings, ns, n),
            Some(Watched::Service) => cached_in(&self.services, ns, n),
            Some(Watched::Secret) => cached_in(&self.secrets, ns, n),
        }
    }

    pub fn deployment(&self, ns: &str, name: &str) -> Option<Arc<Deployment>> {
        self.deployments.get(&ObjectRef::new(name).within(ns))
    }

    /// Waits for every cache's first listing.
    pub async fn wait_until_ready(&self) -> anyhow::Result<()> {
        self.deployments.wait_until_ready().await?;
        self.configmaps.wait_until_ready().await?;
        self.serviceaccounts.wait_until_ready().await?;
        self.roles.wait_until_ready().await?;
        self.rolebindings.wait_until_ready().await?;
        self.services.wait_until_ready().await?;
        self.secrets.wait_until_ready().await?;
        Ok(())
    }
}

/// The fingerprint of an object as returned by the API server (after an apply), comparable with
/// [`OwnedStores::cached`]; `None` for kinds we don't watch.
pub fn seen_after_apply(key: &ObjKey, applied: &Value) -> Option<Seen> {
    let mut v = applied.clone();
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    match Watched::of(key)? {
        Watched::Deployment => seen_from_value::<Deployment>(&v),
        Watched::ConfigMap => seen_from_value::<ConfigMap>(&v),
        Watched::ServiceAccount => seen_from_value::<ServiceAccount>(&v),
        Watched::Role => seen_from_value::<Role>(&v),
        Watched::RoleBinding => seen_from_value::<RoleBinding>(&v),
        Watched::Service => seen_from_value::<Service>(&v),
        Watched::Secret => seen_from_value::<Secret>(&v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(kind: &str) -> ObjKey {
        ObjKey {
            group: String::new(),
            kind: kind.into(),
            name: "a".into(),
        }
    }

    #[test]
    fn fingerprint_ignores_status_version_and_managed_fields() {
        let base = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "n", "resourceVersion": "5",
                         "managedFields": [{"manager": "x"}]},
            "data": {"k": "v"}
        });
        let a = seen_after_apply(&key("ConfigMap"), &base).unwrap();
        let mut moved = base.clone();
        moved["metadata"]["resourceVersion"] = "9".into();
        moved["metadata"]["managedFields"] = json!([]);
        let b = seen_after_apply(&key("ConfigMap"), &moved).unwrap();
        assert_eq!(a.fingerprint, b.fingerprint);
        assert_eq!((a.resource_version, b.resource_version), (5, 9));
        let mut edited = base.clone();
        edited["data"]["k"] = "w".into();
        let c = seen_after_apply(&key("ConfigMap"), &edited).unwrap();
        assert_ne!(a.fingerprint, c.fingerprint);
        assert_eq!(seen_after_apply(&key("Widget"), &base), None);
    }

    #[test]
    fn status_changes_keep_the_fingerprint() {
        let k = ObjKey {
            group: "apps".into(),
            kind: "Deployment".into(),
            name: "a".into(),
        };
        let d = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                       "metadata": {"name": "a", "resourceVersion": "1"},
                       "spec": {"selector": {}, "template": {}},
                       "status": {"replicas": 0}});
        let mut later = d.clone();
        later["status"]["replicas"] = 1.into();
        later["metadata"]["resourceVersion"] = "2".into();
        assert_eq!(
            seen_after_apply(&k, &d).unwrap().fingerprint,
            seen_after_apply(&k, &later).unwrap().fingerprint
        );
    }
}
