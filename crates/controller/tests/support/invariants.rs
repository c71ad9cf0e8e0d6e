//! The upgrade invariants, checked over the watch history of a namespace: every version of
//! every rollout and child the API server shows is recorded here, and [`judge`] replays them and
//! reports each moment an invariant did not hold (the invariants are listed there). The checker
//! trusts nothing the operator says: it judges from the recorded objects only, matched by uid;
//! the operator's Events are quoted next to a violation and excuse nothing.
//!
//! A watch can miss history: after an API server restart, a watch resumed from an old
//! resourceVersion is told it is too old and lists again, and an object deleted in between
//! is simply absent from the new list. Such an object *vanished*: it is dropped from the live
//! set right after the last version seen; [`Recorder::vanished`] counts them so a suite can say
//! how much history it could not see.

pub mod judge;

use futures::StreamExt;
use judge::{Rules, Seen, Verdict, deleting, label, state_of};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use numaplane_api::keys::labels;
use numaplane_api::numaflow::{InterStepBufferService, MonoVertex, Pipeline};
use numaplane_api::{ISBServiceRollout, MonoVertexRollout, PipelineRollout};
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// How long any rollout of the suites may take to converge after a change: the slowest
/// flows (force drains of unhealthy specs, pause grace periods) take a few minutes.
pub const CONVERGENCE_BOUND: Duration = Duration::from_secs(360);

type Log = Arc<Mutex<Vec<Seen>>>;

/// Records a namespace's history from creation until dropped.
pub struct Recorder {
    log: Log,
    tasks: Vec<JoinHandle<()>>,
    rules: Arc<Mutex<Rules>>,
}

impl Drop for Recorder {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

async fn record<K>(client: &Client, ns: &str, log: &Log, kind: &'static str) -> JoinHandle<()>
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned
        + serde::Serialize
        + Send
        + Sync
        + 'static,
{
    // Typed, as the operator reads them: their free-form fields are read at any depth (a
    // `DynamicObject` fails on a document nested deeper than 128 levels, and so does a list).
    let api = Api::<K>::namespaced(client.clone(), ns);
    let log = log.clone();
    let (listed_tx, listed) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let mut listed_tx = Some(listed_tx);
        // The last version of every object the watch shows as live, and the objects a relist
        // in progress has shown, by uid (a name may come back as another object).
        let mut known: BTreeMap<String, (u64, Value)> = BTreeMap::new();
        let mut relisted: Option<BTreeSet<String>> = None;
        let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
        while let Some(ev) = stream.next().await {
            // A relist after the first list shows only each object's current version: what
            // happened to it since its last recorded one is unknown.
            let mut after_gap = false;
            let (obj, gone) = match ev {
                Ok(watcher::Event::Apply(o)) => (o, false),
                Ok(watcher::Event::InitApply(o)) => {
                    if let Some(uids) = relisted.as_mut() {
                        uids.insert(o.meta().uid.clone().unwrap_or_default());
                    }
                    after_gap = listed_tx.is_none();
                    (o, false)
                }
                Ok(watcher::Event::Delete(o)) => (o, true),
                Ok(watcher::Event::Init) => {
                    relisted = Some(BTreeSet::new());
                    continue;
                }
                Ok(watcher::Event::InitDone) => {
                    if let Some(tx) = listed_tx.take() {
                        let _ = tx.send(());
                    }
                    let uids = relisted.take().unwrap_or_default();
                    let missing: Vec<String> = known
                        .keys()
                        .filter(|u| !uids.contains(*u))
                        .cloned()
                        .collect();
                    for uid in missing {
                        if let Some((rv, obj)) = known.remove(&uid)
                            && let Ok(mut l) = log.lock()
                        {
                            l.push(Seen::new(rv, kind, obj).vanished());
                        }
                    }
                    continue;
                }
                Err(_) => continue,
            };
            let rv = obj
                .meta()
                .resource_version
                .as_deref()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let uid = obj.meta().uid.clone().unwrap_or_default();
            let mut obj = serde_json::to_value(&obj).unwrap_or_default();
            if let Some(m) = obj["metadata"].as_object_mut() {
                m.remove("managedFields");
            }
            if gone {
                known.remove(&uid);
            } else {
                known.insert(uid, (rv, obj.clone()));
            }
            if let Ok(mut l) = log.lock() {
                let mut seen = Seen::new(rv, kind, obj);
                seen.after_gap = after_gap;
                l.push(if gone { seen.deleted_at(rv) } else { seen });
            }
        }
    });
    let _ = listed.await;
    task
}

/// Records the maximum of `controller_config`, in force from now on (nothing if the operator
/// would refuse the file).
fn configure(rules: &Mutex<Rules>, controller_config: &str) {
    if let Ok(c) = numaplane_core::config::parse_controller_config(controller_config)
        && let Ok(mut r) = rules.lock()
    {
        let now = Timestamp::now();
        r.max_recyclable.push((now, c.max_recyclable_duration));
        r.deletion_drain_timeout
            .push((now, c.deletion_drain_timeout));
    }
}

impl Recorder {
    /// Starts recording `ns`; returns once every watch has its initial list. Until
    /// [`Recorder::configure`] (or [`Recorder::follow_config_file`]) is called, no undrained
    /// deletion is excused by expiry.
    pub async fn start(client: &Client, ns: &str) -> Recorder {
        let log = Log::default();
        let tasks = vec![
            record::<Pipeline>(client, ns, &log, "Pipeline").await,
            record::<MonoVertex>(client, ns, &log, "MonoVertex").await,
            record::<InterStepBufferService>(client, ns, &log, "InterStepBufferService").await,
            record::<PipelineRollout>(client, ns, &log, "PipelineRollout").await,
            record::<MonoVertexRollout>(client, ns, &log, "MonoVertexRollout").await,
            record::<ISBServiceRollout>(client, ns, &log, "ISBServiceRollout").await,
        ];
        Recorder {
            log,
            tasks,
            rules: Arc::default(),
        }
    }

    /// Takes `pipeline.maxRecyclableDurationMinutes` from the operator's config file contents
    /// (its default when they leave it out), in force from now on. Contents the operator would
    /// refuse change nothing, as for the operator.
    pub fn configure(&self, controller_config: &str) {
        configure(&self.rules, controller_config);
    }

    /// [`Recorder::configure`] with the config file at `path` now and whenever it changes
    /// (tests rewrite it to reload the operator's configuration live).
    pub fn follow_config_file(&mut self, path: &std::path::Path) {
        let (rules, path) = (self.rules.clone(), path.to_path_buf());
        let mut last = String::new();
        self.tasks.push(tokio::spawn(async move {
            loop {
                if let Ok(text) = std::fs::read_to_string(&path)
                    && text != last
                {
                    configure(&rules, &text);
                    last = text;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }));
    }

    /// Says the test itself breaks the watches (API server and etcd restarts): a vanished
    /// pipeline whose deletion cannot be judged is counted ([`Verdict::unjudged`]), not a
    /// violation.
    pub fn history_may_have_gaps(&self) {
        if let Ok(mut r) = self.rules.lock() {
            r.history_may_have_gaps = true;
        }
    }

    /// Says that the test restarted the API server or etcd from `from` until `to` (see
    /// [`judge::Rules::restarts`]).
    pub fn control_plane_restarted(&self, from: Instant, to: Instant) {
        if let Ok(mut r) = self.rules.lock() {
            r.restarts.push((from, to));
        }
    }

    /// Says that the test deletes child `name` of `kind` itself: its deletion is not held
    /// against the operator. The object is the one recorded live under that name now (by uid);
    /// the name alone only when none is recorded yet.
    pub fn deleted_by_test(&self, kind: &'static str, name: &str) {
        let uid = self.log.lock().ok().and_then(|l| {
            l.iter()
                .rev()
                .find(|s| s.kind == kind && s.name == name)
                .filter(|s| !s.gone)
                .map(|s| s.uid.clone())
        });
        if let Ok(mut r) = self.rules.lock() {
            match uid {
                Some(uid) => r.by_test.insert(uid),
                None => r.by_test_names.insert((kind, name.to_string())),
            };
        }
    }

    /// Says that the test has just created child `name` of `kind` itself (a duplicate the
    /// operator must clear up): the children at once its creation makes are not held against
    /// the operator. Waits until the recorder has seen it.
    pub async fn made_by_test(&self, kind: &'static str, name: &str) {
        let t0 = Instant::now();
        let uid = loop {
            let uid = self.log.lock().ok().and_then(|l| {
                l.iter()
                    .rev()
                    .find(|s| s.kind == kind && s.name == name && !s.gone)
                    .map(|s| s.uid.clone())
            });
            match uid {
                Some(uid) => break uid,
                None if t0.elapsed() < Duration::from_secs(30) => {
                    tokio::time::sleep(Duration::from_millis(100)).await
                }
                None => panic!("the recorder never saw {kind} {name}"),
            }
        };
        if let Ok(mut r) = self.rules.lock() {
            r.made_by_test.insert(uid);
        }
    }

    /// The judgement of the history so far; `events` are only quoted.
    fn verdict(&self, events: &[Event]) -> Verdict {
        let log = self.log.lock().map(|l| l.clone()).unwrap_or_default();
        let rules = self.rules.lock().map(|r| r.clone()).unwrap_or_default();
        judge::judge(&log, events, &rules, Instant::now(), CONVERGENCE_BOUND)
    }

    /// How many objects were deleted while a watch was relisting.
    pub fn vanished(&self) -> usize {
        self.log
            .lock()
            .map(|l| l.iter().filter(|s| s.vanished).count())
            .unwrap_or(0)
    }

    /// The recorded history of the rollout or child a violation names ("rv N: Kind name …"),
    /// with its children: one line per version (rv, kind, name, uid, upgrade state, phase), at
    /// most `max` of them around rv N (the last ones when the violation names no rv).
    pub fn trace(&self, violation: &str, max: usize) -> String {
        let words: Vec<&str> = violation.split_whitespace().collect();
        let Some(name) = words.get(3).or(words.get(1)) else {
            return String::new();
        };
        let name = name.trim_end_matches(':');
        let at: Option<u64> = violation
            .strip_prefix("rv ")
            .and_then(|r| r.split(':').next())
            .and_then(|r| r.parse().ok());
        let log = self.log.lock().map(|l| l.clone()).unwrap_or_default();
        let versions: Vec<&Seen> = judge::ordered(&log)
            .into_iter()
            .filter(|s| s.name == name || label(&s.obj, labels::PARENT_ROLLOUT_NAME) == Some(name))
            .collect();
        let end = match at {
            Some(rv) => {
                let i = versions.partition_point(|s| s.rv <= rv);
                (i + max / 2).min(versions.len())
            }
            None => versions.len(),
        };
        let lines: Vec<String> = versions[end.saturating_sub(max)..end]
            .iter()
            .map(|s| {
                format!(
                    "    rv {} {} {} uid={} state={} phase={} drained={} desired={}{}{}",
                    s.rv,
                    s.kind,
                    s.name,
                    s.uid.get(..8).unwrap_or(&s.uid),
                    state_of(&s.obj).unwrap_or("-"),
                    s.obj["status"]["phase"].as_str().unwrap_or("-"),
                    s.obj["status"]["drainedOnPause"],
                    s.obj["spec"]["lifecycle"]["desiredPhase"]
                        .as_str()
                        .unwrap_or("-"),
                    if deleting(&s.obj) { " deleting" } else { "" },
                    if s.vanished {
                        " VANISHED (deleted during a relist)"
                    } else if s.gone {
                        " DELETED"
                    } else {
                        ""
                    }
                )
            })
            .collect();
        lines.join("\n")
    }

    /// The judgement so far, with the namespace's Events as they are now (quoted only). Waits
    /// a moment first so the watches catch up with the last writes.
    pub async fn verdict_now(&self, client: &Client, ns: &str) -> Verdict {
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        let events = Api::<Event>::namespaced(client.clone(), ns)
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        self.verdict(&events)
    }

    /// Every violation so far (see [`Recorder::verdict_now`]).
    pub async fn violations_now(&self, client: &Client, ns: &str) -> Vec<String> {
        self.verdict_now(client, ns).await.violations
    }

    /// Panics with every violation, and the history around each, if any.
    pub async fn assert_held(&self, client: &Client, ns: &str) {
        let v = self.violations_now(client, ns).await;
        assert!(
            v.is_empty(),
            "{} invariant violation(s) in {ns}, each with its history:\n{}",
            v.len(),
            v.iter()
                .map(|v| format!("{v}\n{}", self.trace(v, 40)))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}
