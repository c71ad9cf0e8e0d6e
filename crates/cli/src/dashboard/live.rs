//! The table kept current by watches on the four rollout kinds: rows in memory, every change
//! broadcast to the browsers that follow it.

use super::table::{Row, key, row};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use kube::runtime::{WatchStreamExt, watcher};
use numaplane_api::Kind;
use serde::Serialize;
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use tokio::sync::broadcast;

/// Where the dashboard looks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    AllNamespaces,
    /// These namespaces (sorted): `-n`, or those the user may list rollouts in.
    Namespaces(Vec<String>),
}

impl Scope {
    /// One API per watch: the cluster-wide one, or one per namespace.
    pub fn apis(&self, client: &Client, kind: Kind) -> Vec<(Option<String>, Api<DynamicObject>)> {
        let resource = kind.rollout_resource();
        match self {
            Scope::AllNamespaces => vec![(None, Api::all_with(client.clone(), &resource))],
            Scope::Namespaces(list) => list
                .iter()
                .map(|ns| {
                    (
                        Some(ns.clone()),
                        Api::namespaced_with(client.clone(), ns, &resource),
                    )
                })
                .collect(),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Scope::AllNamespaces => "all namespaces".to_string(),
            Scope::Namespaces(list) if list.len() == 1 => format!("namespace {}", list[0]),
            Scope::Namespaces(list) => format!("namespaces {}", list.join(", ")),
        }
    }

    fn watches(&self) -> usize {
        match self {
            Scope::AllNamespaces => Kind::ALL.len(),
            Scope::Namespaces(list) => Kind::ALL.len() * list.len(),
        }
    }
}

/// One change of the table, as sent to browsers.
#[derive(Serialize, Clone, Debug)]
#[serde(tag = "op", rename_all = "camelCase")]
pub enum Change {
    Upsert { row: Box<Row> },
    Remove { key: String },
}

pub struct Table {
    pub scope: Scope,
    rows: RwLock<BTreeMap<String, Row>>,
    changes: broadcast::Sender<Change>,
    /// Per watch: why its rows are missing or stale (not installed, forbidden, watch error).
    notes: Mutex<BTreeMap<String, String>>,
    /// Watches (kind and namespace) whose first list has completed or failed.
    synced: Mutex<HashSet<String>>,
}

/// What `/api/info` reports about the table.
#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
pub struct TableInfo {
    pub scope: String,
    pub rollouts: usize,
    pub synced: bool,
    pub notes: Vec<String>,
}

impl Table {
    pub fn new(scope: Scope) -> Arc<Self> {
        // Room for a burst (a namespace of rollouts created at once); a browser that falls
        // further behind gets the whole table again.
        let (changes, _) = broadcast::channel(4096);
        Arc::new(Table {
            scope,
            rows: RwLock::new(BTreeMap::new()),
            changes,
            notes: Mutex::new(BTreeMap::new()),
            synced: Mutex::new(HashSet::new()),
        })
    }

    /// Subscribes to changes, then reads the rows: a change racing the read is sent twice at
    /// worst (upserts are idempotent), never lost.
    pub fn follow(&self) -> (broadcast::Receiver<Change>, Vec<Row>) {
        let rx = self.changes.subscribe();
        (rx, self.rows())
    }

    pub fn rows(&self) -> Vec<Row> {
        self.rows
            .read()
            .map(|rows| rows.values().cloned().collect())
            .unwrap_or_default()
    }

    pub fn info(&self) -> TableInfo {
        let synced = self.synced.lock().map(|s| s.len()).unwrap_or_default();
        let notes = self
            .notes
            .lock()
            .map(|n| n.values().cloned().collect())
            .unwrap_or_default();
        TableInfo {
            scope: self.scope.describe(),
            rollouts: self.rows.read().map(|r| r.len()).unwrap_or_default(),
            synced: synced >= self.scope.watches(),
            notes,
        }
    }

    fn note(&self, watch: &str, note: Option<String>) {
        if let Ok(mut notes) = self.notes.lock() {
            match note {
                Some(n) => notes.insert(watch.to_string(), n),
                None => notes.remove(watch),
            };
        }
    }

    fn synced(&self, watch: &str) {
        if let Ok(mut synced) = self.synced.lock() {
            synced.insert(watch.to_string());
        }
    }

    fn upsert(&self, row: Row) {
        let Ok(mut rows) = self.rows.write() else {
            return;
        };
        if rows.get(&row.key) == Some(&row) {
            return;
        }
        rows.insert(row.key.clone(), row.clone());
        drop(rows);
        // No receiver is not an error: nobody has the page open.
        let _ = self.changes.send(Change::Upsert { row: Box::new(row) });
    }

    fn remove(&self, key: &str) {
        let removed = self
            .rows
            .write()
            .map(|mut rows| rows.remove(key).is_some())
            .unwrap_or_default();
        if removed {
            let _ = self.changes.send(Change::Remove {
                key: key.to_string(),
            });
        }
    }

    /// Removes the rows of `kind` (in `namespace`, if given) not in `keep` (after a relist).
    fn retain(&self, kind: Kind, namespace: Option<&str>, keep: &HashSet<String>) {
        let gone: Vec<String> = self
            .rows
            .read()
            .map(|rows| {
                rows.values()
                    .filter(|r| r.kind == kind.rollout_kind() && !keep.contains(&r.key))
                    .filter(|r| namespace.is_none_or(|ns| r.namespace == ns))
                    .map(|r| r.key.clone())
                    .collect()
            })
            .unwrap_or_default();
        for k in gone {
            self.remove(&k);
        }
    }

    /// Starts the table's watches: each kind, cluster-wide or in each namespace of the scope.
    pub fn start(self: &Arc<Self>, client: &Client) {
        for kind in Kind::ALL {
            for (namespace, api) in self.scope.apis(client, kind) {
                tokio::spawn(self.clone().watch(kind, namespace, api));
            }
        }
    }

    /// Follows one watch until the process ends.
    async fn watch(
        self: Arc<Self>,
        kind: Kind,
        namespace: Option<String>,
        api: Api<DynamicObject>,
    ) {
        let id = match &namespace {
            Some(ns) => format!("{}s in {ns}", kind.rollout_kind()),
            None => format!("{}s", kind.rollout_kind()),
        };
        let mut events = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        let mut listed: HashSet<String> = HashSet::new();
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Init) => listed.clear(),
                Ok(watcher::Event::InitApply(obj)) => {
                    let r = row_of(kind, &obj);
                    listed.insert(r.key.clone());
                    self.upsert(r);
                }
                Ok(watcher::Event::InitDone) => {
                    self.retain(kind, namespace.as_deref(), &listed);
                    listed.clear();
                    self.note(&id, None);
                    self.synced(&id);
                }
                Ok(watcher::Event::Apply(obj)) => self.upsert(row_of(kind, &obj)),
                Ok(watcher::Event::Delete(obj)) => self.remove(&key(
                    kind,
                    obj.metadata.namespace.as_deref().unwrap_or_default(),
                    obj.metadata.name.as_deref().unwrap_or_default(),
                )),
                Err(e) => {
                    self.note(&id, Some(format!("{id}: {e}")));
                    // A watch that cannot list (kind not installed, forbidden) still counts as
                    // synced: the table is as complete as it will get, and says why.
                    self.synced(&id);
                }
            }
        }
    }
}

fn row_of(kind: Kind, obj: &DynamicObject) -> Row {
    row(kind, &serde_json::to_value(obj).unwrap_or_default())
}

/// At most this many namespaces are probed one by one when rollouts cannot be listed
/// cluster-wide.
const PROBED_NAMESPACES: usize = 500;

/// The widest scope the user may list: every namespace when `namespace` is `None` and a
/// cluster-wide list of rollouts is allowed; else the namespaces in which the user may list
/// PipelineRollouts (when namespaces may be listed), else the context's namespace. `-n` gives
/// exactly that namespace. The second value says why the scope is narrower than asked.
pub async fn scope(
    client: &Client,
    namespace: Option<&str>,
    default_namespace: &str,
) -> (Scope, Option<String>) {
    if let Some(ns) = namespace {
        return (Scope::Namespaces(vec![ns.to_string()]), None);
    }
    let cluster_wide =
        Api::<DynamicObject>::all_with(client.clone(), &Kind::Pipeline.rollout_resource());
    let refusal = match cluster_wide.list(&ListParams::default().limit(1)).await {
        Err(kube::Error::Api(e)) if e.code == 403 => e.message,
        _ => return (Scope::AllNamespaces, None),
    };
    let fallback = |why: String| {
        (
            Scope::Namespaces(vec![default_namespace.to_string()]),
            Some(format!(
                "rollouts cannot be listed in all namespaces ({refusal}){why}: showing namespace {default_namespace}"
            )),
        )
    };
    let names: Vec<String> = match Api::<Namespace>::all(client.clone())
        .list_metadata(&ListParams::default().limit(PROBED_NAMESPACES as u32))
        .await
    {
        Ok(list) => list
            .items
            .into_iter()
            .filter_map(|n| n.metadata.name)
            .collect(),
        Err(e) => return fallback(format!(" and namespaces cannot be listed ({e})")),
    };
    let mut allowed: Vec<String> = futures::stream::iter(names)
        .map(|ns| async move {
            let api = Api::<DynamicObject>::namespaced_with(
                client.clone(),
                &ns,
                &Kind::Pipeline.rollout_resource(),
            );
            match api.list(&ListParams::default().limit(1)).await {
                Err(kube::Error::Api(e)) if e.code == 403 => None,
                _ => Some(ns),
            }
        })
        .buffer_unordered(8)
        .filter_map(|ns| async move { ns })
        .collect()
        .await;
    if allowed.is_empty() {
        return fallback(" nor in any namespace".to_string());
    }
    allowed.sort();
    let scope = Scope::Namespaces(allowed);
    let why = format!(
        "rollouts cannot be listed in all namespaces ({refusal}): showing the {} you may list them in (namespaces created later appear after a restart)",
        scope.describe()
    );
    (scope, Some(why))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(key: &str, phase: &str) -> Row {
        Row {
            key: key.to_string(),
            kind: "PipelineRollout",
            namespace: "ns".into(),
            name: key.rsplit('/').next().unwrap_or_default().into(),
            phase: phase.into(),
            strategy: String::new(),
            waiting: String::new(),
            until: None,
            healthy: "True".into(),
            created: String::new(),
        }
    }

    #[test]
    fn changes_are_broadcast_once_and_relists_remove_what_is_gone() {
        let t = Table::new(Scope::AllNamespaces);
        let (mut rx, rows) = t.follow();
        assert!(rows.is_empty());
        t.upsert(r("ns/PipelineRollout/a", "Pending"));
        t.upsert(r("ns/PipelineRollout/a", "Pending"));
        t.upsert(r("ns/PipelineRollout/b", "Deployed"));
        t.upsert(r("ns/PipelineRollout/a", "Deployed"));
        let mut seen = Vec::new();
        while let Ok(c) = rx.try_recv() {
            seen.push(serde_json::to_value(&c).unwrap_or_default());
        }
        assert_eq!(
            seen.len(),
            3,
            "an unchanged row is not sent again: {seen:?}"
        );
        assert_eq!(seen[2]["op"], "upsert");
        assert_eq!(seen[2]["row"]["phase"], "Deployed");
        let keep: HashSet<String> = ["ns/PipelineRollout/b".to_string()].into();
        t.retain(Kind::Pipeline, Some("other"), &keep);
        assert!(
            rx.try_recv().is_err(),
            "another namespace's relist removes nothing here"
        );
        t.retain(Kind::Pipeline, Some("ns"), &keep);
        let removed = rx
            .try_recv()
            .map(|c| serde_json::to_value(&c).unwrap_or_default());
        assert_eq!(
            removed.ok(),
            Some(serde_json::json!({"op": "remove", "key": "ns/PipelineRollout/a"}))
        );
        assert_eq!(t.rows().len(), 1);
        assert_eq!(t.info().rollouts, 1);
    }
}
