//! The namespace of a namespaced object, read in one place.

use kube::Resource;
use kube::core::NamespaceResourceScope;

/// The namespace of a namespaced object, borrowed. Every object the API server stores has one;
/// an object not stored yet (a manifest) reads as "".
pub trait Namespaced {
    fn ns(&self) -> &str;
}

impl<K: Resource<Scope = NamespaceResourceScope>> Namespaced for K {
    fn ns(&self) -> &str {
        self.meta().namespace.as_deref().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    #[test]
    fn a_stored_object_has_its_namespace_a_manifest_none() {
        let mut cm = ConfigMap::default();
        assert_eq!(cm.ns(), "");
        cm.metadata.namespace = Some("team-a".into());
        assert_eq!(cm.ns(), "team-a");
    }
}
