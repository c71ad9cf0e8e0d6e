//! The invariants of an upgrade, checked over the watch history of a namespace (issue
//! "Reliability…", item 1). Every version of every rollout and child the API server shows is
//! recorded; the check replays them in resourceVersion order (one etcd: one order over all
//! kinds) and reports each moment an invariant did not hold:
//!
//! - at most one trial child per rollout;
//! - a promoted child is not deleted while it is still the promoted one, unless its rollout is
//!   going too (a successor is promoted first, and the old one relabelled);
//! - a pipeline that may hold data (`requires-drain`) is deleted only after it was Paused with
//!   `drainedOnPause: true`, or when the configuration allowed it (marked for deletion, force
//!   promotion, expiry, no drain needed) and an Event on it says which;
//! - while a PipelineRollout's pause-and-drain is in progress, its pipeline's spec changes
//!   (beyond its lifecycle and vertex scales) only while the pipeline is Paused, or Failed, or
//!   the rollout allows data loss;
//! - every rollout converges (its current generation observed, phase Deployed or Failed with
//!   the failure stated) within [`CONVERGENCE_BOUND`] of being changed.
//!
//! A watch can miss history: after an API server restart, a watch resumed from an old
//! resourceVersion is told it is too old and lists again, and an object deleted in between
//! is simply absent from the new list. Such an object *vanished*: it is dropped from the live
//! set right after the last version seen (it cannot count as a second trial after that), and
//! its deletion, whose last state is unknown, is not judged; [`Recorder::vanished`] counts them
//! so a suite can say how much history it could not see.

use futures::StreamExt;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use numaplane_api::keys::{annotations, labels, upgrade_state};
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

/// One version of an object as a watch delivered it.
#[derive(Clone, Debug)]
struct Seen {
    rv: u64,
    /// When it arrived.
    at: Instant,
    kind: &'static str,
    name: String,
    gone: bool,
    /// Deleted while the watch was not looking (see the module's comment).
    vanished: bool,
    obj: Value,
}

type Log = Arc<Mutex<Vec<Seen>>>;

/// Records a namespace's history from creation until dropped.
pub struct Recorder {
    log: Log,
    tasks: Vec<JoinHandle<()>>,
    /// Children the test itself deletes (kind, name): the user's doing, not the operator's.
    by_test: Mutex<BTreeSet<(&'static str, String)>>,
}

impl Drop for Recorder {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// The rollout kind that owns children of `kind`.
fn parent_kind(kind: &str) -> Option<&'static str> {
    match kind {
        "Pipeline" => Some("PipelineRollout"),
        "MonoVertex" => Some("MonoVertexRollout"),
        "InterStepBufferService" => Some("ISBServiceRollout"),
        _ => None,
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
        // The last version of every object the watch shows as live, and the names a relist
        // in progress has shown.
        let mut known: BTreeMap<String, (u64, Value)> = BTreeMap::new();
        let mut relisted: Option<BTreeSet<String>> = None;
        let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
        while let Some(ev) = stream.next().await {
            let (obj, gone) = match ev {
                Ok(watcher::Event::Apply(o)) => (o, false),
                Ok(watcher::Event::InitApply(o)) => {
                    if let Some(names) = relisted.as_mut() {
                        names.insert(o.meta().name.clone().unwrap_or_default());
                    }
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
                    let names = relisted.take().unwrap_or_default();
                    let missing: Vec<String> = known
                        .keys()
                        .filter(|n| !names.contains(*n))
                        .cloned()
                        .collect();
                    for name in missing {
                        if let Some((rv, obj)) = known.remove(&name)
                            && let Ok(mut l) = log.lock()
                        {
                            l.push(Seen {
                                rv,
                                at: Instant::now(),
                                kind,
                                name,
                                gone: true,
                                vanished: true,
                                obj,
                            });
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
            let name = obj.meta().name.clone().unwrap_or_default();
            let mut obj = serde_json::to_value(&obj).unwrap_or_default();
            if let Some(m) = obj["metadata"].as_object_mut() {
                m.remove("managedFields");
            }
            if gone {
                known.remove(&name);
            } else {
                known.insert(name.clone(), (rv, obj.clone()));
            }
            if let Ok(mut l) = log.lock() {
                l.push(Seen {
                    rv,
                    at: Instant::now(),
                    kind,
                    name,
                    gone,
                    vanished: false,
                    obj,
                });
            }
        }
    });
    let _ = listed.await;
    task
}

impl Recorder {
    /// Starts recording `ns`; returns once every watch has its initial list.
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
            by_test: Mutex::default(),
        }
    }

    /// Says that the test deletes child `name` of `kind` itself: its deletion is not held
    /// against the operator.
    pub fn deleted_by_test(&self, kind: &'static str, name: &str) {
        if let Ok(mut s) = self.by_test.lock() {
            s.insert((kind, name.to_string()));
        }
    }

    /// Every violation in the history so far, given the namespace's Events.
    fn violations(&self, events: &[Event]) -> Vec<String> {
        let mut log = self.log.lock().map(|l| l.clone()).unwrap_or_default();
        // A vanished object's drop sorts right after its last version (same rv).
        log.sort_by_key(|s| (s.rv, s.vanished));
        log.dedup_by(|a, b| {
            a.rv == b.rv && a.kind == b.kind && a.name == b.name && a.vanished == b.vanished
        });
        let by_test = self.by_test.lock().map(|s| s.clone()).unwrap_or_default();
        let mut v = check(&log, events, &by_test);
        v.extend(convergence(&log, Instant::now(), CONVERGENCE_BOUND));
        v
    }

    /// How many objects were deleted while a watch was relisting (their deletion not judged).
    pub fn vanished(&self) -> usize {
        self.log
            .lock()
            .map(|l| l.iter().filter(|s| s.vanished).count())
            .unwrap_or(0)
    }

    /// The recorded history of the rollout or child a violation names ("rv N: Kind name …"),
    /// with its children: one line per version (rv, kind, name, upgrade state, phase), the
    /// last `max` of them.
    pub fn trace(&self, violation: &str, max: usize) -> String {
        let words: Vec<&str> = violation.split_whitespace().collect();
        let Some(name) = words.get(3).or(words.get(1)) else {
            return String::new();
        };
        let name = name.trim_end_matches(':');
        let mut log = self.log.lock().map(|l| l.clone()).unwrap_or_default();
        log.sort_by_key(|s| (s.rv, s.vanished));
        let lines: Vec<String> = log
            .iter()
            .filter(|s| s.name == name || label(&s.obj, labels::PARENT_ROLLOUT_NAME) == Some(name))
            .map(|s| {
                format!(
                    "    rv {} {} {} state={} phase={}{}{}",
                    s.rv,
                    s.kind,
                    s.name,
                    state_of(&s.obj).unwrap_or("-"),
                    s.obj["status"]["phase"].as_str().unwrap_or("-"),
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
        lines[lines.len().saturating_sub(max)..].join("\n")
    }

    /// Every violation so far, given the namespace's Events as they are now. Waits a moment
    /// first so the watches catch up with the last writes.
    pub async fn violations_now(&self, client: &Client, ns: &str) -> Vec<String> {
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        let events = Api::<Event>::namespaced(client.clone(), ns)
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        self.violations(&events)
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

fn label<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj["metadata"]["labels"][key].as_str()
}

fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj["metadata"]["annotations"][key].as_str()
}

fn deleting(obj: &Value) -> bool {
    !obj["metadata"]["deletionTimestamp"].is_null()
}

fn state_of(obj: &Value) -> Option<&str> {
    label(obj, labels::UPGRADE_STATE)
}

/// Paused as asked, and drained.
fn paused_drained(obj: &Value) -> bool {
    obj["spec"]["lifecycle"]["desiredPhase"] == "Paused"
        && obj["status"]["phase"] == "Paused"
        && obj["status"]["drainedOnPause"] == true
}

fn is_rollout(kind: &str) -> bool {
    kind.ends_with("Rollout")
}

/// The rollout has caught up with its spec: its generation observed, Deployed or Failed.
fn converged(obj: &Value) -> bool {
    let st = &obj["status"];
    st["observedGeneration"] == obj["metadata"]["generation"]
        && matches!(st["phase"].as_str(), Some("Deployed" | "Failed"))
}

/// Rollouts that took longer than `bound` to converge after a change, or have not converged
/// `bound` after one.
fn convergence(log: &[Seen], now: Instant, bound: Duration) -> Vec<String> {
    let mut out = Vec::new();
    // (kind, name) -> since when it has been unconverged.
    let mut since: BTreeMap<(&str, &str), Instant> = BTreeMap::new();
    for s in log.iter().filter(|s| is_rollout(s.kind)) {
        let key = (s.kind, s.name.as_str());
        if s.gone || converged(&s.obj) {
            if let Some(t) = since.remove(&key)
                && s.at.duration_since(t) > bound
                && !s.gone
            {
                out.push(format!(
                    "rv {}: {} {} took {:?} to converge (bound {bound:?})",
                    s.rv,
                    s.kind,
                    s.name,
                    s.at.duration_since(t)
                ));
            }
        } else {
            since.entry(key).or_insert(s.at);
        }
    }
    for ((kind, name), t) in since {
        if now.duration_since(t) > bound {
            out.push(format!(
                "{kind} {name} not converged {:?} after a change (bound {bound:?})",
                now.duration_since(t)
            ));
        }
    }
    out
}

/// A pipeline spec without what pausing and draining themselves change.
fn substance(spec: &Value) -> Value {
    let mut spec = spec.clone();
    if let Some(m) = spec.as_object_mut() {
        m.remove("lifecycle");
    }
    for v in spec["vertices"].as_array_mut().into_iter().flatten() {
        if let Some(m) = v.as_object_mut() {
            m.remove("scale");
        }
    }
    spec
}

/// The top-level fields that differ between two specs, each as `field: before -> after`.
fn changed(before: &Value, after: &Value) -> String {
    let empty = serde_json::Map::new();
    let (b, a) = (
        before.as_object().unwrap_or(&empty),
        after.as_object().unwrap_or(&empty),
    );
    let keys: BTreeSet<&String> = b.keys().chain(a.keys()).collect();
    keys.into_iter()
        .filter(|k| b.get(*k) != a.get(*k))
        .map(|k| {
            let show = |v: Option<&Value>| v.map_or("(none)".to_string(), Value::to_string);
            format!("{k}: {} -> {}", show(b.get(k)), show(a.get(k)))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Event reasons that say a pipeline was deleted without draining, and why it was allowed.
const UNDRAINED_REASONS: [&str; 2] = ["DrainNotRequired", "DrainIncomplete"];

fn check(
    log: &[Seen],
    events: &[Event],
    by_test: &BTreeSet<(&'static str, String)>,
) -> Vec<String> {
    let mut out = Vec::new();
    // Live objects by (kind, name); pipelines seen paused and drained.
    let mut live: BTreeMap<(&str, &str), &Value> = BTreeMap::new();
    let mut drained: BTreeSet<&str> = BTreeSet::new();
    let mut reported_trials: BTreeSet<(String, String)> = BTreeSet::new();
    let undrained_event = |name: &str| {
        events.iter().any(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                && e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("Pipeline")
                && e.reason
                    .as_deref()
                    .is_some_and(|r| UNDRAINED_REASONS.contains(&r))
        })
    };
    for s in log {
        let key = (s.kind, s.name.as_str());
        let before = live.get(&key).copied();
        // A vanished object's last state is unknown: its deletion is not judged.
        let newly_going =
            (s.gone || deleting(&s.obj)) && !before.is_some_and(deleting) && !s.vanished;
        if s.kind == "Pipeline" && paused_drained(&s.obj) {
            drained.insert(&s.name);
        }
        if let Some(rollout_kind) = parent_kind(s.kind)
            && newly_going
            && !by_test.contains(&(s.kind, s.name.clone()))
        {
            let parent = label(&s.obj, labels::PARENT_ROLLOUT_NAME).unwrap_or_default();
            let parent_going = live
                .get(&(rollout_kind, parent))
                .is_none_or(|r| deleting(r));
            let at = format!("rv {}: {} {}", s.rv, s.kind, s.name);
            if state_of(&s.obj) == Some(upgrade_state::PROMOTED) && !parent_going {
                out.push(format!(
                    "{at} deleted while still promoted ({rollout_kind} {parent} not being deleted)"
                ));
            }
            if s.kind == "Pipeline"
                && annotation(&s.obj, annotations::REQUIRES_DRAIN) == Some("true")
                && !parent_going
                && !drained.contains(s.name.as_str())
                && !undrained_event(&s.name)
            {
                out.push(format!(
                    "{at} may hold data (requires-drain) and was deleted without a drained pause \
                     or an Event saying why ({}); last labels {}",
                    UNDRAINED_REASONS.join(" or "),
                    s.obj["metadata"]["labels"]
                ));
            }
        }
        if s.kind == "Pipeline"
            && !s.gone
            && let Some(prev) = before
            && substance(&prev["spec"]) != substance(&s.obj["spec"])
        {
            let parent = label(&s.obj, labels::PARENT_ROLLOUT_NAME).unwrap_or_default();
            let rollout = live.get(&("PipelineRollout", parent));
            let in_ppnd = rollout
                .is_some_and(|r| r["status"]["upgradeInProgress"] == "PipelinePauseAndDrain");
            let allowed = rollout
                .is_some_and(|r| annotation(r, annotations::ALLOW_DATA_LOSS) == Some("true"));
            let phase = prev["status"]["phase"].as_str().unwrap_or_default();
            if in_ppnd && !allowed && !matches!(phase, "Paused" | "Failed") {
                out.push(format!(
                    "rv {}: Pipeline {} changed under pause-and-drain while {phase:?}, data loss not \
                     allowed: {}; rollout status {}",
                    s.rv,
                    s.name,
                    changed(&substance(&prev["spec"]), &substance(&s.obj["spec"])),
                    rollout.map_or(Value::Null, |r| r["status"].clone())
                ));
            }
        }
        if s.gone {
            live.remove(&key);
        } else {
            live.insert(key, &s.obj);
        }
        // At most one trial per rollout, at every moment.
        if parent_kind(s.kind).is_some() {
            let mut trials: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
            for ((kind, name), obj) in &live {
                if *kind == s.kind
                    && !deleting(obj)
                    && matches!(
                        state_of(obj),
                        Some(upgrade_state::TRIAL | upgrade_state::IN_PROGRESS)
                    )
                {
                    let parent = label(obj, labels::PARENT_ROLLOUT_NAME).unwrap_or_default();
                    trials.entry(parent).or_default().push(name);
                }
            }
            for (parent, names) in trials.into_iter().filter(|(_, n)| n.len() > 1) {
                let pair = (s.kind.to_string(), names.join(","));
                if reported_trials.insert(pair) {
                    out.push(format!(
                        "rv {}: {} {parent} has {} trials at once: {names:?}",
                        s.rv,
                        parent_kind(s.kind).unwrap_or_default(),
                        names.len()
                    ));
                }
            }
        }
    }
    out
}

/// The checker's own cases: each invariant caught when broken, nothing reported when kept.
pub fn self_test() {
    use serde_json::json;
    let child = |rv: u64, name: &str, state: &str, extra: Value| {
        let mut obj = json!({"metadata": {"name": name, "labels": {
            labels::PARENT_ROLLOUT_NAME: "pr", labels::UPGRADE_STATE: state}}});
        if let Some(m) = extra.as_object() {
            for (k, v) in m {
                obj[k] = v.clone();
            }
        }
        Seen {
            rv,
            at: Instant::now(),
            kind: "Pipeline",
            name: name.into(),
            gone: false,
            vanished: false,
            obj,
        }
    };
    let rollout = Seen {
        rv: 1,
        at: Instant::now(),
        kind: "PipelineRollout",
        name: "pr".into(),
        gone: false,
        vanished: false,
        obj: json!({"metadata": {"name": "pr"}}),
    };
    let gone = |mut s: Seen| {
        s.gone = true;
        s
    };
    let requires = json!({"metadata": {"name": "pr-0", "annotations": {annotations::REQUIRES_DRAIN: "true"},
        "labels": {labels::PARENT_ROLLOUT_NAME: "pr", labels::UPGRADE_STATE: "recyclable"}}});

    let none = BTreeSet::new();
    // Two trials at once.
    let log = vec![
        rollout.clone(),
        child(2, "pr-1", "trial", json!({})),
        child(3, "pr-2", "trial", json!({})),
    ];
    assert_eq!(
        check(&log, &[], &none).len(),
        1,
        "two trials: {:?}",
        check(&log, &[], &none)
    );
    // A promoted child deleted while promoted; then the same with the rollout going.
    let log = vec![
        rollout.clone(),
        child(2, "pr-0", "promoted", json!({})),
        gone(child(3, "pr-0", "promoted", json!({}))),
    ];
    assert_eq!(check(&log, &[], &none).len(), 1, "promoted deleted");
    // Vanished in a relist: gone after its last version, its deletion not judged.
    let vanished = |mut s: Seen| {
        s.gone = true;
        s.vanished = true;
        s
    };
    let log = vec![
        rollout.clone(),
        child(2, "pr-0", "promoted", json!({})),
        child(3, "pr-1", "trial", json!({})),
        vanished(child(3, "pr-1", "trial", json!({}))),
        vanished(child(2, "pr-0", "promoted", json!({}))),
        child(5, "pr-2", "trial", json!({})),
    ];
    let mut sorted = log.clone();
    sorted.sort_by_key(|s| (s.rv, s.vanished));
    assert!(
        check(&sorted, &[], &none).is_empty(),
        "{:?}",
        check(&sorted, &[], &none)
    );
    let by_test = BTreeSet::from([("Pipeline", "pr-0".to_string())]);
    assert!(check(&log, &[], &by_test).is_empty(), "deleted by the test");
    let mut going = rollout.clone();
    going.rv = 3;
    going.obj["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    let log = vec![
        rollout.clone(),
        child(2, "pr-0", "promoted", json!({})),
        going,
        gone(child(4, "pr-0", "promoted", json!({}))),
    ];
    assert!(
        check(&log, &[], &none).is_empty(),
        "{:?}",
        check(&log, &[], &none)
    );
    // A pipeline that may hold data, deleted undrained; drained first; or with an Event.
    let undrained = Seen {
        rv: 2,
        at: Instant::now(),
        kind: "Pipeline",
        name: "pr-0".into(),
        gone: false,
        vanished: false,
        obj: requires.clone(),
    };
    let log = vec![rollout.clone(), undrained.clone(), gone(undrained.clone())];
    assert_eq!(check(&log, &[], &none).len(), 1, "undrained delete");
    let mut drained = undrained.clone();
    drained.rv = 3;
    drained.obj["spec"] = json!({"lifecycle": {"desiredPhase": "Paused"}});
    drained.obj["status"] = json!({"phase": "Paused", "drainedOnPause": true});
    let mut last = gone(undrained.clone());
    last.rv = 4;
    let log = vec![rollout.clone(), undrained.clone(), drained, last.clone()];
    assert!(
        check(&log, &[], &none).is_empty(),
        "{:?}",
        check(&log, &[], &none)
    );
    let event: Event = serde_json::from_value(json!({
        "metadata": {"name": "e"}, "eventTime": "2026-01-01T00:00:00.000000Z",
        "reason": "DrainIncomplete", "regarding": {"kind": "Pipeline", "name": "pr-0"}
    }))
    .expect("event");
    let log = vec![rollout.clone(), undrained, last];
    assert!(check(&log, &[event], &none).is_empty());

    // Pause-and-drain: a change while Running is caught, one while Paused is not.
    let mut ppnd = rollout.clone();
    ppnd.rv = 2;
    ppnd.obj["status"] = json!({"upgradeInProgress": "PipelinePauseAndDrain"});
    let running = child(
        3,
        "pr-0",
        "promoted",
        json!({"spec": {"vertices": [{"name": "in"}]},
        "status": {"phase": "Running"}}),
    );
    let mut changed = running.clone();
    changed.rv = 4;
    changed.obj["spec"]["vertices"][0]["udf"] = json!({});
    let log = vec![ppnd.clone(), running.clone(), changed.clone()];
    assert_eq!(check(&log, &[], &none).len(), 1, "changed while running");
    let mut scaled = running.clone();
    scaled.rv = 4;
    scaled.obj["spec"]["vertices"][0]["scale"] = json!({"min": 0});
    scaled.obj["spec"]["lifecycle"] = json!({"desiredPhase": "Paused"});
    let log = vec![ppnd.clone(), running.clone(), scaled];
    assert!(
        check(&log, &[], &none).is_empty(),
        "pausing is not a change"
    );
    let mut paused = running.clone();
    paused.obj["status"]["phase"] = json!("Paused");
    let log = vec![ppnd, paused, changed];
    assert!(
        check(&log, &[], &none).is_empty(),
        "{:?}",
        check(&log, &[], &none)
    );
}
