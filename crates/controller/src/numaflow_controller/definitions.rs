//! Numaflow controller definitions: `<namespace>/<version>` → manifest, fed by watches of the
//! ConfigMaps labelled `numaplane.numaproj.io/config: numaflow-controller-definitions`.
//! Versions added, changed or removed (also by deleting or editing a ConfigMap) take effect at
//! once and are announced, so the NumaflowControllers using them are woken.
//!
//! Only trusted namespaces are searched: the operator's own and those the controller config
//! lists in `numaflowControllerDefinitionsNamespaces`. A definition is the text of every object
//! the operator creates, with its privileges, in a NumaflowController's namespace, so one
//! written by whoever can create ConfigMaps in that namespace would widen what they can do.

use crate::events::EventSink;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use numaplane_api::Namespaced;
use numaplane_api::keys::{config_kind, labels};
use numaplane_core::config::parse_controller_definitions;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, Mutex};
use tokio::sync::{broadcast, watch};
use tracing::{info, warn};

/// Versions whose definition changed in a namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Changed {
    pub namespace: String,
    pub versions: BTreeSet<String>,
}

/// The namespaces searched for a version, in order, when none had it, and the untrusted ones
/// that define it (ignored).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotFound {
    pub searched: Vec<String>,
    pub ignored: Vec<String>,
}

/// Whether definitions in `namespace` are used.
pub fn trusted(namespace: &str, operator_namespace: &str, listed: &[String]) -> bool {
    namespace == operator_namespace || listed.iter().any(|n| n == namespace)
}

/// Where a NumaflowController of `namespace` looks for its version, in order: its own namespace
/// if it is listed (as the reference looks there first), the operator's, then the listed ones.
pub fn search_order(namespace: &str, operator_namespace: &str, listed: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    if listed.iter().any(|n| n == namespace) {
        out.push(namespace.to_string());
    }
    for ns in std::iter::once(operator_namespace).chain(listed.iter().map(String::as_str)) {
        if !out.iter().any(|n| n == ns) {
            out.push(ns.to_string());
        }
    }
    out
}

type Versions = BTreeMap<String, Arc<str>>;
/// A ConfigMap by (namespace, name).
type MapKey = (String, String);

#[derive(Default)]
struct Inner {
    /// Versions defined by each ConfigMap, by (namespace, name).
    maps: BTreeMap<MapKey, Versions>,
    /// ConfigMaps seen since a watch scope began (re)listing; `None` scope = all namespaces.
    relisting: Vec<(Option<String>, HashSet<MapKey>)>,
}

pub struct Definitions {
    inner: Mutex<Inner>,
    changes: broadcast::Sender<Changed>,
    /// How many watch scopes have completed their first listing.
    listed: watch::Sender<usize>,
}

impl Default for Definitions {
    fn default() -> Self {
        Self::new()
    }
}

impl Definitions {
    pub fn new() -> Self {
        Self {
            inner: Mutex::default(),
            changes: broadcast::channel(64).0,
            listed: watch::channel(0).0,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The manifest for `version` from the first of `search` (see [`search_order`]) that has
    /// it. Two ConfigMaps of one namespace defining the same version: the one whose name sorts
    /// last wins (deterministic, unlike the reference's "last event wins").
    pub fn lookup(&self, version: &str, search: &[String]) -> Result<Arc<str>, NotFound> {
        let inner = self.lock();
        for ns in search {
            let found = inner
                .maps
                .iter()
                .filter(|((n, _), _)| n == ns)
                .filter_map(|(_, versions)| versions.get(version))
                .next_back();
            if let Some(spec) = found {
                return Ok(spec.clone());
            }
        }
        let mut ignored: Vec<String> = inner
            .maps
            .iter()
            .filter(|((n, _), versions)| !search.contains(n) && versions.contains_key(version))
            .map(|((n, _), _)| n.clone())
            .collect();
        ignored.dedup();
        Err(NotFound {
            searched: search.to_vec(),
            ignored,
        })
    }

    /// Announcements of changed versions.
    pub fn subscribe(&self) -> broadcast::Receiver<Changed> {
        self.changes.subscribe()
    }

    /// Waits until `scopes` watches have listed their ConfigMaps once, so a NumaflowController
    /// never fails for a definition that simply wasn't read yet (the reference has no barrier).
    pub async fn wait_listed(&self, scopes: usize) {
        let mut rx = self.listed.subscribe();
        let _ = rx.wait_for(|n| *n >= scopes).await;
    }

    /// Records a ConfigMap's definitions (replacing what it defined before). Returns the data
    /// keys that could not be parsed, with why; the others are used.
    pub fn upsert(&self, cm: &ConfigMap) -> Vec<String> {
        let key = (cm.ns().to_string(), cm.name_any());
        let mut versions = Versions::new();
        let mut errors = Vec::new();
        for (k, v) in cm.data.iter().flatten() {
            let one = BTreeMap::from([(k.clone(), v.clone())]);
            match parse_controller_definitions(&one) {
                Ok(defs) => {
                    for (version, spec) in defs {
                        versions.insert(version, spec.into());
                    }
                }
                Err(e) => errors.push(e.to_string()),
            }
        }
        let mut inner = self.lock();
        for (scope, seen) in inner.relisting.iter_mut() {
            if scope.as_deref().is_none_or(|s| s == key.0) {
                seen.insert(key.clone());
            }
        }
        let old = inner.maps.insert(key.clone(), versions.clone());
        drop(inner);
        self.announce(&key.0, old.as_ref(), Some(&versions));
        errors
    }

    /// Forgets a deleted ConfigMap's definitions.
    pub fn remove(&self, namespace: &str, name: &str) {
        let old = self
            .lock()
            .maps
            .remove(&(namespace.to_string(), name.to_string()));
        self.announce(namespace, old.as_ref(), None);
    }

    /// A watch of `scope` starts (re)listing: ConfigMaps it doesn't list again are gone.
    pub fn begin_listing(&self, scope: &Option<String>) {
        let mut inner = self.lock();
        inner.relisting.retain(|(s, _)| s != scope);
        inner.relisting.push((scope.clone(), HashSet::new()));
    }

    /// The listing of `scope` is complete: drop ConfigMaps deleted while the watch was down.
    pub fn end_listing(&self, scope: &Option<String>) {
        let gone: Vec<MapKey> = {
            let mut inner = self.lock();
            let Some(pos) = inner.relisting.iter().position(|(s, _)| s == scope) else {
                return;
            };
            let (_, seen) = inner.relisting.swap_remove(pos);
            inner
                .maps
                .keys()
                .filter(|k| scope.as_deref().is_none_or(|s| s == k.0) && !seen.contains(*k))
                .cloned()
                .collect()
        };
        for (ns, name) in gone {
            self.remove(&ns, &name);
        }
        self.listed.send_modify(|n| *n += 1);
    }

    fn announce(&self, namespace: &str, old: Option<&Versions>, new: Option<&Versions>) {
        let empty = Versions::new();
        let (old, new) = (old.unwrap_or(&empty), new.unwrap_or(&empty));
        let versions: BTreeSet<String> = old
            .keys()
            .chain(new.keys())
            .filter(|v| old.get(*v) != new.get(*v))
            .cloned()
            .collect();
        if !versions.is_empty() {
            info!(%namespace, ?versions, "Numaflow controller definitions changed");
            // No subscriber (yet) is fine: controllers read the store when they start.
            let _ = self.changes.send(Changed {
                namespace: namespace.to_string(),
                versions,
            });
        }
    }
}

/// Whether a namespace's definitions are used now (the controller config may change).
pub type Trust = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// Watches the definitions ConfigMaps of one scope (a namespace, or all when `None`). Those of
/// untrusted namespaces are kept (the config may come to list their namespace) but never used,
/// and say so in the log.
pub async fn watch(
    api: Api<ConfigMap>,
    scope: Option<String>,
    defs: Arc<Definitions>,
    events: EventSink,
    trust: Trust,
) {
    let selector = format!(
        "{}={}",
        labels::CONFIG,
        config_kind::NUMAFLOW_CONTROLLER_DEFINITIONS
    );
    let mut stream = watcher(api, watcher::Config::default().labels(&selector))
        .default_backoff()
        .boxed();
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(watcher::Event::Init) => defs.begin_listing(&scope),
            Ok(watcher::Event::InitDone) => defs.end_listing(&scope),
            Ok(watcher::Event::Apply(cm) | watcher::Event::InitApply(cm)) => {
                let (ns, name) = (cm.ns(), cm.name_any());
                if !trust(ns) {
                    warn!(%ns, %name, "Numaflow controller definitions ignored: only those in the operator's namespace or a namespace listed in numaflowControllerDefinitionsNamespaces are used");
                }
                for e in defs.upsert(&cm) {
                    warn!(%ns, %name, error = %e, "invalid Numaflow controller definitions skipped");
                    events.config_warning(ns, &name, &e).await;
                }
            }
            Ok(watcher::Event::Delete(cm)) => defs.remove(cm.ns(), &cm.name_any()),
            Err(e) => warn!(error = %e, "definitions ConfigMap watch error (retrying)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cm(ns: &str, name: &str, data: serde_json::Value) -> ConfigMap {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns},
            "data": data,
        }))
        .unwrap()
    }

    fn ns() -> [String; 1] {
        ["ns".to_string()]
    }

    fn defs_yaml(entries: &[(&str, &str)]) -> String {
        let mut s = String::from("controllerDefinitions:\n");
        for (v, spec) in entries {
            s.push_str(&format!("  - version: \"{v}\"\n    fullSpec: \"{spec}\"\n"));
        }
        s
    }

    fn order(ns: &str, listed: &[&str]) -> Vec<String> {
        let listed: Vec<String> = listed.iter().map(|s| s.to_string()).collect();
        search_order(ns, "sys", &listed)
    }

    #[test]
    fn only_trusted_namespaces_are_searched() {
        let d = Definitions::new();
        d.upsert(&cm(
            "sys",
            "a",
            json!({"k": defs_yaml(&[("1.0", "sys-1.0"), ("2.0", "sys-2.0")])}),
        ));
        d.upsert(&cm(
            "team",
            "b",
            json!({"k": defs_yaml(&[("1.0", "team-1.0"), ("3.0", "team-3.0")])}),
        ));
        // The NumaflowController's own namespace is not trusted unless listed.
        assert_eq!(order("team", &[]), ["sys"]);
        assert_eq!(&*d.lookup("1.0", &order("team", &[])).unwrap(), "sys-1.0");
        assert_eq!(
            d.lookup("3.0", &order("team", &[])).unwrap_err(),
            NotFound {
                searched: vec!["sys".into()],
                ignored: vec!["team".into()]
            }
        );
        // Listed: searched first for its own NumaflowControllers, after the operator's for others.
        assert_eq!(order("team", &["team"]), ["team", "sys"]);
        assert_eq!(
            &*d.lookup("1.0", &order("team", &["team"])).unwrap(),
            "team-1.0"
        );
        assert_eq!(order("other", &["team"]), ["sys", "team"]);
        assert_eq!(
            &*d.lookup("1.0", &order("other", &["team"])).unwrap(),
            "sys-1.0"
        );
        assert_eq!(
            &*d.lookup("3.0", &order("other", &["team"])).unwrap(),
            "team-3.0"
        );
        assert_eq!(order("sys", &["sys", "a"]), ["sys", "a"]);
        assert_eq!(
            d.lookup("v1.0", &order("team", &["team"])).unwrap_err(),
            NotFound {
                searched: vec!["team".into(), "sys".into()],
                ignored: vec![]
            }
        );
        assert!(trusted("sys", "sys", &[]));
        assert!(!trusted("team", "sys", &[]));
        assert!(trusted("team", "sys", &["team".to_string()]));
    }

    #[test]
    fn edits_and_deletions_take_effect_and_are_announced() {
        let d = Definitions::new();
        let mut rx = d.subscribe();
        d.upsert(&cm(
            "ns",
            "a",
            json!({"k": defs_yaml(&[("1.0", "x"), ("2.0", "y")])}),
        ));
        assert_eq!(
            rx.try_recv().unwrap(),
            Changed {
                namespace: "ns".into(),
                versions: ["1.0".to_string(), "2.0".to_string()].into()
            }
        );
        // 1.0 removed from the ConfigMap (the reference keeps it), 2.0 changed.
        d.upsert(&cm("ns", "a", json!({"k": defs_yaml(&[("2.0", "z")])})));
        assert_eq!(
            rx.try_recv().unwrap().versions,
            ["1.0".to_string(), "2.0".to_string()].into()
        );
        assert!(d.lookup("1.0", &ns()).is_err());
        assert_eq!(&*d.lookup("2.0", &ns()).unwrap(), "z");
        // Unchanged content announces nothing.
        d.upsert(&cm("ns", "a", json!({"k": defs_yaml(&[("2.0", "z")])})));
        assert!(rx.try_recv().is_err());
        d.remove("ns", "a");
        assert_eq!(rx.try_recv().unwrap().versions, ["2.0".to_string()].into());
        assert!(d.lookup("2.0", &ns()).is_err());
    }

    #[test]
    fn same_version_in_two_configmaps_is_deterministic() {
        let d = Definitions::new();
        d.upsert(&cm(
            "ns",
            "b",
            json!({"k": defs_yaml(&[("1.0", "from-b")])}),
        ));
        d.upsert(&cm(
            "ns",
            "a",
            json!({"k": defs_yaml(&[("1.0", "from-a")])}),
        ));
        assert_eq!(&*d.lookup("1.0", &ns()).unwrap(), "from-b");
        d.remove("ns", "b");
        assert_eq!(&*d.lookup("1.0", &ns()).unwrap(), "from-a");
    }

    #[test]
    fn a_bad_key_does_not_hide_the_good_ones() {
        let d = Definitions::new();
        let errors = d.upsert(&cm(
            "ns",
            "a",
            json!({"bad": "controllerDefinitions: [{version: 1}]", "good": defs_yaml(&[("1.0", "x")])}),
        ));
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].contains("bad.controllerDefinitions[0]"),
            "{errors:?}"
        );
        assert!(d.lookup("1.0", &ns()).is_ok());
    }

    #[tokio::test]
    async fn relisting_drops_configmaps_deleted_meanwhile() {
        let d = Definitions::new();
        let scope = Some("ns".to_string());
        d.begin_listing(&scope);
        d.upsert(&cm("ns", "a", json!({"k": defs_yaml(&[("1.0", "x")])})));
        d.upsert(&cm("ns", "b", json!({"k": defs_yaml(&[("2.0", "y")])})));
        d.end_listing(&scope);
        d.wait_listed(1).await;
        // Another namespace's ConfigMap is outside this scope's relist.
        d.upsert(&cm("other", "c", json!({"k": defs_yaml(&[("3.0", "z")])})));
        d.begin_listing(&scope);
        d.upsert(&cm("ns", "b", json!({"k": defs_yaml(&[("2.0", "y")])})));
        d.end_listing(&scope);
        assert!(d.lookup("1.0", &ns()).is_err());
        assert!(d.lookup("2.0", &ns()).is_ok());
        assert!(d.lookup("3.0", &["other".to_string()]).is_ok());
    }
}
