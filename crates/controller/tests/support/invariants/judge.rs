//! The judgement of a recorded history (pure: no I/O, so its own tests feed it made-up
//! histories). It trusts nothing the operator says about itself: every verdict comes from the
//! recorded versions of the objects, matched by uid, never by name, and never from Events
//! (they are quoted next to a violation, as what the operator claimed, and excuse nothing).
//!
//! The invariants, each checked at every recorded version (replayed in resourceVersion order:
//! one etcd, one order over all kinds):
//!
//! - at most one trial and at most one promoted child per rollout (children not being deleted);
//! - a promoted child is not deleted while it is still the promoted one, unless its rollout is
//!   being deleted;
//! - a pipeline that may hold data (it was ever marked `requires-drain`, or ever recorded
//!   Running with a spec that lets data in) is deleted only if its last recorded version
//!   before the deletion was Paused, drained (`status.drainedOnPause`) and still asked to pause
//!   (`spec.lifecycle.desiredPhase`), or if an allowance visible on the recorded objects covers
//!   it: the pipeline labelled recyclable, and one of `marked-for-deletion` on it,
//!   `allow-data-loss` or `forcePromote` on its rollout, or its recorded
//!   `recyclable-start-time` plus the configured `maxRecyclableDurationMinutes` passed before
//!   the deletion. A reason the operator writes on the pipeline counts for nothing by itself;
//! - an InterStepBufferService is not deleted while a recorded pipeline that is not gone names
//!   it (`spec.interStepBufferServiceName`, default `default`);
//! - while a PipelineRollout's pause-and-drain is in progress, its pipeline's spec changes
//!   (beyond its lifecycle and vertex scales) only while the pipeline is Paused, or Failed, or
//!   the rollout allows data loss;
//! - every rollout converges (its current generation observed, phase Deployed or Failed) within
//!   the bound of being changed.
//!
//! A child whose rollout was never recorded (an owner uid never seen, or no owner) is judged
//! like any other: only a rollout recorded as being deleted excuses its children's deletion.
//!
//! A watch can miss history (see [`super::Recorder`]): an object deleted while a watch was
//! relisting *vanished*. It leaves the live set right after its last recorded version; a
//! vanished pipeline that may hold data and whose last version neither was drained nor had an
//! allowance cannot be judged, and is reported as such ([`Verdict::unjudged`]).

use k8s_openapi::api::events::v1::Event;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use numaplane_api::keys::{annotations, labels, upgrade_state};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// How long after a change of its config file the operator may still act on the old contents.
const CONFIG_LAG: SignedDuration = SignedDuration::from_secs(10);

/// How long a promotion may leave two promoted children: the operator labels the trial promoted,
/// then retires the old one (the reference's order; two promoted after a crash are purged, while
/// none promoted would make a new child). At worst a crash between the two writes and a
/// successor's wait for the lease lie between them.
const HANDOFF_BOUND: SignedDuration = SignedDuration::from_secs(120);

/// How much earlier than its arrival at the recorder a time the operator stamps on a write may
/// be (the stamp is truncated to the second, and the watch takes a moment to deliver it).
const STAMP_SLACK: SignedDuration = SignedDuration::from_secs(5);

/// One version of an object as a watch delivered it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub rv: u64,
    /// When it arrived (for convergence).
    pub at: Instant,
    /// The wall-clock time it arrived (a deletion without `deletionTimestamp` happened by then).
    pub wall: Timestamp,
    pub kind: &'static str,
    pub name: String,
    pub uid: String,
    /// The watch said it was deleted.
    pub gone: bool,
    /// Deleted while the watch was not looking (see the module's comment).
    pub vanished: bool,
    /// Delivered by a relist: versions between the previous recorded one and this were not seen.
    pub after_gap: bool,
    pub obj: Value,
}

impl Rules {
    /// Rules with `pipeline.maxRecyclableDurationMinutes` `max` all along.
    pub fn with_max_recyclable(max: Duration) -> Rules {
        Rules {
            max_recyclable: vec![(Timestamp::MIN, max)],
            ..Rules::default()
        }
    }

    /// The maximum recyclable duration the operator may have acted on at `when`.
    fn max_recyclable_at(&self, when: Timestamp) -> Option<Duration> {
        least_at(&self.max_recyclable, when)
    }

    /// The deletion drain timeout the operator may have acted on at `when`.
    fn deletion_drain_timeout_at(&self, when: Timestamp) -> Option<Duration> {
        least_at(&self.deletion_drain_timeout, when)
    }
}

/// The least of the settings (`list`, oldest first) in force at some moment of the
/// [`CONFIG_LAG`] before `when` (a change takes a moment to be read).
fn least_at(list: &[(Timestamp, Duration)], when: Timestamp) -> Option<Duration> {
    let from = when.checked_sub(CONFIG_LAG).unwrap_or(when);
    let current = list.iter().rposition(|(t, _)| *t <= from).unwrap_or(0);
    list.get(current..)
        .unwrap_or_default()
        .iter()
        .filter(|(t, _)| *t <= when)
        .map(|(_, d)| *d)
        .min()
}

impl Seen {
    /// A version of `obj` (its name and uid read from its metadata) at resourceVersion `rv`.
    pub fn new(rv: u64, kind: &'static str, obj: Value) -> Seen {
        let text = |k: &str| obj["metadata"][k].as_str().unwrap_or_default().to_string();
        Seen {
            rv,
            at: Instant::now(),
            wall: Timestamp::now(),
            kind,
            name: text("name"),
            uid: text("uid"),
            gone: false,
            vanished: false,
            after_gap: false,
            obj,
        }
    }

    /// The same version reported deleted, at `rv`.
    pub fn deleted_at(mut self, rv: u64) -> Seen {
        self.rv = rv;
        self.gone = true;
        self
    }

    /// The same version reported deleted while a watch relisted (same rv: it sorts right after).
    pub fn vanished(mut self) -> Seen {
        self.gone = true;
        self.vanished = true;
        self
    }
}

/// What the judgement needs besides the history.
#[derive(Clone, Debug, Default)]
pub struct Rules {
    /// The operator's `pipeline.maxRecyclableDurationMinutes` from each moment on (its config
    /// file as it changed), oldest first; no entry: unknown, and expiry never excuses an
    /// undrained deletion.
    pub max_recyclable: Vec<(Timestamp, Duration)>,
    /// The operator's `pipeline.deletionDrainTimeoutSeconds` likewise; no entry: unknown, and a
    /// deleted PipelineRollout's pipeline deleted undrained is excused only by its rollout's
    /// allowance.
    pub deletion_drain_timeout: Vec<(Timestamp, Duration)>,
    /// Objects the test deletes itself, by uid: the user's doing, not the operator's.
    pub by_test: BTreeSet<String>,
    /// Same, by (kind, name), for those the recorder had not seen when the test said so.
    pub by_test_names: BTreeSet<(&'static str, String)>,
    /// Children the test creates itself, by uid: a second promoted child or trial that their
    /// creation makes is the user's doing (what the operator does with it is judged).
    pub made_by_test: BTreeSet<String>,
    /// The history has gaps the test made itself (API server restarts): a vanished pipeline that
    /// cannot be judged is reported in [`Verdict::unjudged`] instead of as a violation.
    pub history_may_have_gaps: bool,
    /// When the test restarted the API server or etcd (start, back up). The watches' history
    /// around a restart was seen to miss versions the operator saw (a status the operator acted
    /// on, never delivered to the recorder): a judgement that rests on the versions either side
    /// of one is reported in [`Verdict::unjudged`], not passed and not failed.
    pub restarts: Vec<(Instant, Instant)>,
}

/// How long after a control-plane restart the recorded history is not trusted to be complete.
const RESTART_SETTLE: Duration = Duration::from_secs(10);

impl Rules {
    /// Whether the versions `prev` and `next` of one object were recorded on either side of
    /// (or during) a control-plane restart, so that versions between them may be missing.
    fn spans_restart(&self, prev: &Seen, next: &Seen) -> bool {
        self.restarts
            .iter()
            .any(|&(from, to)| prev.at <= to + RESTART_SETTLE && next.at >= from)
    }
}

/// The outcome of a judgement.
#[derive(Clone, Debug, Default)]
pub struct Verdict {
    pub violations: Vec<String>,
    /// Deletions whose deciding versions the watch never saw (only with
    /// [`Rules::history_may_have_gaps`]; otherwise they are violations).
    pub unjudged: Vec<String>,
}

pub fn label<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj["metadata"]["labels"][key].as_str()
}

pub fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj["metadata"]["annotations"][key].as_str()
}

pub fn deleting(obj: &Value) -> bool {
    !obj["metadata"]["deletionTimestamp"].is_null()
}

pub fn state_of(obj: &Value) -> Option<&str> {
    label(obj, labels::UPGRADE_STATE)
}

fn desired_phase(obj: &Value) -> &str {
    obj["spec"]["lifecycle"]["desiredPhase"]
        .as_str()
        .filter(|p| !p.is_empty())
        .unwrap_or("Running")
}

/// Paused as asked, and drained: nothing left in it.
pub fn paused_drained(obj: &Value) -> bool {
    desired_phase(obj) == "Paused"
        && obj["status"]["phase"] == "Paused"
        && obj["status"]["drainedOnPause"] == true
}

/// The spec lets data in: asked to run, with a source vertex not capped at zero pods.
fn lets_data_in(obj: &Value) -> bool {
    desired_phase(obj) == "Running"
        && obj["spec"]["vertices"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|v| !v["source"].is_null() && v["scale"]["max"] != 0)
}

/// The InterStepBufferService a pipeline uses (Numaflow's default when unnamed).
fn isbsvc_of(obj: &Value) -> &str {
    obj["spec"]["interStepBufferServiceName"]
        .as_str()
        .filter(|s| !s.is_empty())
        .unwrap_or("default")
}

/// The rollout kind that owns children of `kind`.
pub fn parent_kind(kind: &str) -> Option<&'static str> {
    match kind {
        "Pipeline" => Some("PipelineRollout"),
        "MonoVertex" => Some("MonoVertexRollout"),
        "InterStepBufferService" => Some("ISBServiceRollout"),
        _ => None,
    }
}

fn is_rollout(kind: &str) -> bool {
    kind.ends_with("Rollout")
}

/// The uid of the `kind` owner of `obj` (the controller reference first).
fn owner_uid<'a>(obj: &'a Value, kind: &str) -> Option<&'a str> {
    let refs = obj["metadata"]["ownerReferences"].as_array()?;
    let of_kind = || refs.iter().filter(|r| r["kind"] == kind);
    of_kind()
        .find(|r| r["controller"] == true)
        .or_else(|| of_kind().next())
        .and_then(|r| r["uid"].as_str())
}

/// What the history says of a child's rollout at some moment.
enum Parent<'a> {
    /// Recorded and not being deleted: its versions so far, oldest first.
    Live(Vec<&'a Seen>),
    /// Recorded as being deleted (or gone), its versions so far: its children go with it,
    /// pipelines drained first unless it allowed data loss or its drain timed out.
    Going(Vec<&'a Seen>),
    /// Never recorded (no owner reference, or an owner uid never seen).
    Unknown,
}

/// The rollout converged: its generation observed, Deployed or Failed.
fn converged(obj: &Value) -> bool {
    let st = &obj["status"];
    st["observedGeneration"] == obj["metadata"]["generation"]
        && matches!(st["phase"].as_str(), Some("Deployed" | "Failed"))
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

fn time_of(v: &Value) -> Option<Timestamp> {
    v.as_str().and_then(|s| s.parse().ok())
}

/// The numaplane annotations of a version, for a violation's message.
fn our_annotations(obj: &Value) -> String {
    obj["metadata"]["annotations"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| k.starts_with("numaplane.numaproj.io/"))
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

/// What the operator's Events said about `kind` `name` (quoted, never believed).
fn claims(events: &[Event], kind: &str, name: &str) -> String {
    let said: Vec<String> = events
        .iter()
        .filter(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                && e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some(kind)
        })
        .map(|e| {
            format!(
                "{}: {}",
                e.reason.as_deref().unwrap_or("-"),
                e.note.as_deref().unwrap_or("")
            )
        })
        .collect();
    if said.is_empty() {
        String::new()
    } else {
        format!(
            "; its Events said (not taken as proof): {}",
            said.join(" | ")
        )
    }
}

struct Replay<'a> {
    rules: &'a Rules,
    events: &'a [Event],
    /// The current version of every live object, by uid.
    live: BTreeMap<&'a str, &'a Seen>,
    /// Every version of every object so far, by uid, oldest first.
    versions: BTreeMap<&'a str, Vec<&'a Seen>>,
    /// Uids reported deleted.
    ended: BTreeSet<&'a str>,
    /// Sets of children already reported as too many trials or promoted at once.
    reported: BTreeSet<String>,
    /// Promotions in progress: two promoted children, the newer a trial just before.
    handoffs: Vec<Handoff<'a>>,
    /// The rvs of versions delivered by a relist, by uid: until its next one, an object's
    /// recorded state may be stale.
    gaps: BTreeMap<&'a str, Vec<u64>>,
    /// The rvs of every recorded version, by uid (for looking ahead past the replay).
    all: BTreeMap<&'a str, Vec<u64>>,
    out: Verdict,
}

/// A promotion seen half done: `new` labelled promoted while `old` still is.
struct Handoff<'a> {
    old: &'a str,
    since: Timestamp,
    what: String,
}

impl<'a> Replay<'a> {
    fn by_test(&self, s: &Seen) -> bool {
        self.rules.by_test.contains(&s.uid)
            || self.rules.by_test_names.contains(&(s.kind, s.name.clone()))
    }

    fn parent(&self, child: &Seen) -> Parent<'a> {
        let Some(uid) = parent_kind(child.kind).and_then(|k| owner_uid(&child.obj, k)) else {
            return Parent::Unknown;
        };
        match self.versions.get(uid) {
            None => Parent::Unknown,
            Some(v) if self.ended.contains(uid) => Parent::Going(v.clone()),
            Some(v) if self.live.get(uid).is_some_and(|r| deleting(&r.obj)) => {
                Parent::Going(v.clone())
            }
            Some(v) => Parent::Live(v.clone()),
        }
    }

    /// The key children of one rollout share: its uid, else the name their label gives.
    fn family(child: &Seen) -> Option<String> {
        let kind = parent_kind(child.kind)?;
        match owner_uid(&child.obj, kind) {
            Some(uid) => Some(format!("uid {uid}")),
            None => label(&child.obj, labels::PARENT_ROLLOUT_NAME).map(|n| format!("name {n}")),
        }
    }

    /// Whether a recorded version of pipeline `uid` (up to `last`) could have taken data in.
    fn may_hold_data(&self, uid: &str, last: &Seen) -> bool {
        self.versions
            .get(uid)
            .into_iter()
            .flatten()
            .copied()
            .chain(std::iter::once(last))
            .any(|v| {
                annotation(&v.obj, annotations::REQUIRES_DRAIN) == Some("true")
                    || (v.obj["status"]["phase"] == "Running" && lets_data_in(&v.obj))
            })
    }

    /// The allowance covering the undrained deletion of `last` (the pipeline's last recorded
    /// version) at `when`, or why there is none. The rollout's versions that count are the one
    /// current at `last` and every later one up to the deletion at `until_rv`.
    fn allowance(
        &self,
        last: &Seen,
        parent: &Parent<'a>,
        when: Timestamp,
        until_rv: u64,
    ) -> Result<String, String> {
        let state = state_of(&last.obj).unwrap_or("-");
        if !matches!(
            state,
            upgrade_state::RECYCLABLE | upgrade_state::RECYCLABLE_EXPIRED
        ) {
            return Err(format!(
                "it was not labelled recyclable (upgrade-state {state})"
            ));
        }
        if annotation(&last.obj, annotations::MARKED_FOR_DELETION) == Some("true") {
            return Ok(format!("{} on it", annotations::MARKED_FOR_DELETION));
        }
        let mut why_not = Vec::new();
        match parent {
            Parent::Live(versions) => {
                let from = versions.iter().rposition(|r| r.rv <= last.rv).unwrap_or(0);
                let window = versions[from..].iter().filter(|r| r.rv <= until_rv);
                for r in window {
                    if annotation(&r.obj, annotations::ALLOW_DATA_LOSS) == Some("true") {
                        return Ok(format!(
                            "{} on {} {} (rv {})",
                            annotations::ALLOW_DATA_LOSS,
                            r.kind,
                            r.name,
                            r.rv
                        ));
                    }
                    if r.obj["spec"]["strategy"]["progressive"]["forcePromote"] == true {
                        return Ok(format!(
                            "forcePromote on {} {} (rv {})",
                            r.kind, r.name, r.rv
                        ));
                    }
                }
                why_not.push("its rollout neither allowed data loss nor forced promotion".into());
            }
            Parent::Unknown => why_not.push("its rollout was never recorded".into()),
            Parent::Going(_) => {}
        }
        let start = annotation(&last.obj, annotations::RECYCLABLE_START_TIME);
        match (
            start
                .and_then(|s| s.parse::<Timestamp>().ok())
                .map(|s| self.not_backdated(&last.uid, s)),
            self.rules.max_recyclable_at(when),
        ) {
            (Some(start), Some(max)) => {
                let expiry = SignedDuration::try_from(max)
                    .ok()
                    .and_then(|d| start.checked_add(d).ok());
                match expiry {
                    Some(e) if when >= e => {
                        return Ok(format!(
                            "recyclable since {start}, expired at {e} (max {max:?}), deleted at {when}"
                        ));
                    }
                    _ => why_not.push(format!(
                        "recyclable since {start}, not expired at {when} (max {max:?})"
                    )),
                }
            }
            (None, _) => why_not.push(format!(
                "no readable {} ({start:?})",
                annotations::RECYCLABLE_START_TIME
            )),
            (Some(_), None) => {
                why_not.push("the configured maxRecyclableDurationMinutes is unknown".into())
            }
        }
        Err(why_not.join("; "))
    }

    /// What allowed the undrained deletion at `when` of a pipeline whose PipelineRollout
    /// (`versions`) is being deleted, or why nothing did: the rollout allowed data loss, or its
    /// deletion drain timeout had passed since its recorded deletion.
    fn deletion_allowance(&self, versions: &[&Seen], when: Timestamp) -> Result<String, String> {
        if let Some(r) = versions
            .iter()
            .find(|r| annotation(&r.obj, annotations::ALLOW_DATA_LOSS) == Some("true"))
        {
            return Ok(format!(
                "{} on deleted {} {} (rv {})",
                annotations::ALLOW_DATA_LOSS,
                r.kind,
                r.name,
                r.rv
            ));
        }
        let since = versions
            .iter()
            .filter_map(|r| time_of(&r.obj["metadata"]["deletionTimestamp"]))
            .min();
        match (since, self.rules.deletion_drain_timeout_at(when)) {
            (Some(since), Some(timeout)) => {
                let end = SignedDuration::try_from(timeout)
                    .ok()
                    .and_then(|d| since.checked_add(d).ok());
                match end {
                    Some(end) if when >= end => Ok(format!(
                        "its rollout deleted at {since}, drain timeout {timeout:?} over at {end}"
                    )),
                    _ => Err(format!(
                        "its rollout deleted at {since}, the drain timeout {timeout:?} not over at {when}"
                    )),
                }
            }
            (None, _) => Err("its rollout's deletion time was never recorded".into()),
            (Some(_), None) => Err("the configured deletionDrainTimeoutSeconds is unknown".into()),
        }
    }

    /// The recyclable start time `start` of object `uid`, or, if the annotation was added
    /// while recorded, no earlier than the version that first carried it arrived (less
    /// [`STAMP_SLACK`]): a start time written earlier than its write is not believed.
    fn not_backdated(&self, uid: &str, start: Timestamp) -> Timestamp {
        let versions = self
            .versions
            .get(uid)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let carries = |v: &&Seen| annotation(&v.obj, annotations::RECYCLABLE_START_TIME).is_some();
        match versions.iter().position(carries) {
            Some(i) if i > 0 => {
                let written = versions[i]
                    .wall
                    .checked_sub(STAMP_SLACK)
                    .unwrap_or(versions[i].wall);
                start.max(written)
            }
            _ => start,
        }
    }

    /// A pipeline deleted (at `s`, its last recorded version `last`).
    fn judge_pipeline_deletion(&mut self, s: &'a Seen, last: &'a Seen) {
        let parent = self.parent(last);
        if !self.may_hold_data(&s.uid, last) || paused_drained(&last.obj) {
            return;
        }
        // When it was deleted: the server's deletionTimestamp, else when the watch said so (a
        // vanished one: when its last version was seen, the earliest it can have gone).
        let when = time_of(&s.obj["metadata"]["deletionTimestamp"]).unwrap_or(if s.vanished {
            last.wall
        } else {
            s.wall
        });
        let mut why_not = Vec::new();
        if let Parent::Going(versions) = &parent {
            match self.deletion_allowance(versions, when) {
                Ok(_) => return,
                Err(why) => why_not.push(why),
            }
        }
        match self.allowance(last, &parent, when, s.rv) {
            Ok(_) => return,
            Err(why) => why_not.push(why),
        }
        let why = why_not.join("; ");
        let st = &last.obj["status"];
        let what = format!(
            "rv {}: Pipeline {} (uid {}) may hold data and {}: its last recorded version (rv {}) \
             was phase {}, drainedOnPause {}, desiredPhase {}, labels {}; annotations [{}]; no \
             visible allowance: {why}{}",
            s.rv,
            s.name,
            s.uid,
            if s.vanished {
                "vanished during a relist"
            } else {
                "was deleted undrained"
            },
            last.rv,
            st["phase"].as_str().unwrap_or("-"),
            st["drainedOnPause"],
            desired_phase(&last.obj),
            last.obj["metadata"]["labels"],
            our_annotations(&last.obj),
            claims(self.events, "Pipeline", &s.name),
        );
        if self.rules.spans_restart(last, s) {
            self.out.unjudged.push(format!(
                "{what} (recorded either side of a control-plane restart)"
            ));
        } else if s.vanished && self.rules.history_may_have_gaps {
            self.out.unjudged.push(what);
        } else {
            self.out.violations.push(what);
        }
    }

    /// A child newly being deleted (`s`; `before` its last version, if recorded).
    fn judge_deletion(&mut self, s: &'a Seen, before: Option<&'a Seen>) {
        if parent_kind(s.kind).is_none() || self.by_test(s) {
            return;
        }
        let last = before.unwrap_or(s);
        if s.kind == "Pipeline" {
            self.judge_pipeline_deletion(s, last);
        }
        if s.vanished {
            return;
        }
        let parent = self.parent(last);
        let rollout = parent_kind(s.kind).unwrap_or_default();
        let going = matches!(parent, Parent::Going(_));
        let owner = match parent {
            Parent::Unknown => format!("its {rollout} never recorded"),
            _ => format!(
                "{rollout} {} not being deleted",
                label(&last.obj, labels::PARENT_ROLLOUT_NAME).unwrap_or("-")
            ),
        };
        let at = format!("rv {}: {} {}", s.rv, s.kind, s.name);
        if state_of(&last.obj) == Some(upgrade_state::PROMOTED) && !going {
            self.out
                .violations
                .push(format!("{at} deleted while still promoted ({owner})"));
        }
        // Also while its rollout is deleted: the rollout's deletion waits for its users.
        if s.kind == "InterStepBufferService" {
            let users: Vec<String> = self
                .live
                .values()
                .filter(|p| p.kind == "Pipeline" && isbsvc_of(&p.obj) == s.name)
                .map(|p| format!("{} (rv {})", p.name, p.rv))
                .collect();
            if !users.is_empty() {
                self.out.violations.push(format!(
                    "{at} deleted while recorded pipelines still use it: {}",
                    users.join(", ")
                ));
            }
        }
    }

    /// A pipeline's spec changed under pause-and-drain while it could still move data.
    fn judge_ppnd_change(&mut self, s: &'a Seen, prev: &'a Seen) {
        if substance(&prev.obj["spec"]) == substance(&s.obj["spec"]) {
            return;
        }
        let Parent::Live(versions) = self.parent(s) else {
            return;
        };
        let Some(rollout) = versions.last().copied() else {
            return;
        };
        let in_ppnd = rollout.obj["status"]["upgradeInProgress"] == "PipelinePauseAndDrain";
        let allowed = annotation(&rollout.obj, annotations::ALLOW_DATA_LOSS) == Some("true");
        let phase = prev.obj["status"]["phase"].as_str().unwrap_or_default();
        if in_ppnd && !allowed && !matches!(phase, "Paused" | "Failed") {
            let unseen = self.rules.spans_restart(prev, s);
            let out = if unseen {
                &mut self.out.unjudged
            } else {
                &mut self.out.violations
            };
            out.push(format!(
                "rv {}: Pipeline {} changed under pause-and-drain while {phase:?}, data loss not \
                 allowed: {}; rollout status {}{}",
                s.rv,
                s.name,
                changed(&substance(&prev.obj["spec"]), &substance(&s.obj["spec"])),
                rollout.obj["status"],
                if unseen {
                    " (recorded either side of a control-plane restart)"
                } else {
                    ""
                }
            ));
        }
    }

    /// At most one trial and one promoted child per rollout, now.
    fn judge_counts(&mut self, s: &Seen) {
        let Some(rollout) = parent_kind(s.kind) else {
            return;
        };
        let mut groups: BTreeMap<(String, &str), Vec<&str>> = BTreeMap::new();
        for &c in self.live.values() {
            if c.kind != s.kind || deleting(&c.obj) {
                continue;
            }
            let group = match state_of(&c.obj) {
                Some(upgrade_state::TRIAL | upgrade_state::IN_PROGRESS) => "trials",
                Some(upgrade_state::PROMOTED) => "promoted children",
                _ => continue,
            };
            if let Some(family) = Self::family(c) {
                groups.entry((family, group)).or_default().push(&c.name);
            }
        }
        // The test's own creation of a duplicate: that set of children is not the operator's.
        let made_by_test = self.rules.made_by_test.contains(&s.uid)
            && self
                .versions
                .get(s.uid.as_str())
                .is_some_and(|v| v.len() == 1);
        for ((family, group), names) in groups.into_iter().filter(|(_, n)| n.len() > 1) {
            if self
                .reported
                .insert(format!("{} {group} {}", s.kind, names.join(",")))
                && !made_by_test
            {
                let name = self
                    .live
                    .values()
                    .copied()
                    .find(|c| Self::family(c).as_deref() == Some(family.as_str()))
                    .and_then(|c| label(&c.obj, labels::PARENT_ROLLOUT_NAME))
                    .unwrap_or("-");
                let what = format!(
                    "rv {}: {rollout} {name} has {} {group} at once ({family}): {names:?}",
                    s.rv,
                    names.len(),
                );
                match self.handoff_from(s, group, &names) {
                    Some(old) => self.handoffs.push(Handoff {
                        old,
                        since: s.wall,
                        what,
                    }),
                    None if self.stale_member(s, &family) => self.out.unjudged.push(format!(
                        "{what} (a child's state then is unknown: its next version came from a relist)"
                    )),
                    // What it was before (a trial promoted, say) was lost in the relist.
                    None if s.after_gap => self.out.unjudged.push(format!(
                        "{what} (its state before is unknown: this version came from a relist)"
                    )),
                    None => self.out.violations.push(what),
                }
            }
        }
    }

    /// Whether a live child of `family` other than `s` is next recorded by a relist after
    /// `s`: its state between its last recorded version and that one was not seen.
    fn stale_member(&self, s: &Seen, family: &str) -> bool {
        self.live.values().copied().any(|c| {
            c.uid != s.uid
                && c.kind == s.kind
                && Self::family(c).as_deref() == Some(family)
                && self.gaps.get(c.uid.as_str()).is_some_and(|rvs| {
                    rvs.iter()
                        .find(|&&rv| rv > c.rv)
                        .is_some_and(|&gap| self.next_rv(c) == Some(gap))
                })
        })
    }

    /// The rv of the version recorded after `c` (of the same object), if any.
    fn next_rv(&self, c: &Seen) -> Option<u64> {
        self.all
            .get(c.uid.as_str())
            .and_then(|rvs| rvs.iter().copied().find(|&rv| rv > c.rv))
    }

    /// The old promoted child, if two promoted children at `s` are a promotion half done: `s`
    /// is the newer, labelled promoted now and a trial in its previous version.
    fn handoff_from(&self, s: &Seen, group: &str, names: &[&str]) -> Option<&'a str> {
        if group != "promoted children" || names.len() != 2 || !names.contains(&s.name.as_str()) {
            return None;
        }
        let was_trial = self
            .versions
            .get(s.uid.as_str())
            .and_then(|v| v.iter().rev().nth(1))
            .and_then(|prev| state_of(&prev.obj))
            .is_some_and(|st| matches!(st, upgrade_state::TRIAL | upgrade_state::IN_PROGRESS));
        if !was_trial || state_of(&s.obj) != Some(upgrade_state::PROMOTED) {
            return None;
        }
        let family = Self::family(s);
        self.live
            .values()
            .copied()
            .find(|c| {
                c.uid != s.uid
                    && c.kind == s.kind
                    && Self::family(c) == family
                    && state_of(&c.obj) == Some(upgrade_state::PROMOTED)
                    && !deleting(&c.obj)
            })
            .map(|c| c.uid.as_str())
    }

    /// Settles a half-done promotion whose old child `s` no longer counts as promoted: in time,
    /// or a violation.
    fn end_handoff(&mut self, s: &'a Seen) {
        let retired =
            s.gone || deleting(&s.obj) || state_of(&s.obj) != Some(upgrade_state::PROMOTED);
        if !retired {
            return;
        }
        let (done, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.handoffs)
            .into_iter()
            .partition(|h| h.old == s.uid);
        self.handoffs = rest;
        for h in done {
            let took = s.wall.duration_since(h.since);
            if took > HANDOFF_BOUND {
                self.out.violations.push(format!(
                    "{}; the old one was retired only {took:?} later, at rv {} (bound {HANDOFF_BOUND:?})",
                    h.what, s.rv
                ));
            }
        }
    }

    fn step(&mut self, s: &'a Seen) {
        let before = self.live.get(s.uid.as_str()).copied();
        let newly_going = (s.gone || deleting(&s.obj)) && !before.is_some_and(|b| deleting(&b.obj));
        if newly_going {
            self.judge_deletion(s, before);
        }
        if s.kind == "Pipeline"
            && !s.gone
            && let Some(prev) = before
        {
            self.judge_ppnd_change(s, prev);
        }
        self.versions.entry(s.uid.as_str()).or_default().push(s);
        if s.gone {
            self.live.remove(s.uid.as_str());
            self.ended.insert(s.uid.as_str());
        } else {
            self.live.insert(s.uid.as_str(), s);
        }
        self.end_handoff(s);
        self.judge_counts(s);
    }
}

/// Rollouts that took longer than `bound` to converge after a change, or have not converged
/// `bound` after one.
fn convergence(log: &[&Seen], now: Instant, bound: Duration) -> Vec<String> {
    let mut out = Vec::new();
    // uid -> (since when it has been unconverged, kind, name).
    let mut since: BTreeMap<&str, (Instant, &str, &str)> = BTreeMap::new();
    for s in log.iter().filter(|s| is_rollout(s.kind)) {
        if s.gone || converged(&s.obj) {
            if let Some((t, _, _)) = since.remove(s.uid.as_str())
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
            since.entry(&s.uid).or_insert((s.at, s.kind, &s.name));
        }
    }
    for (t, kind, name) in since.into_values() {
        if now.duration_since(t) > bound {
            out.push(format!(
                "{kind} {name} not converged {:?} after a change (bound {bound:?})",
                now.duration_since(t)
            ));
        }
    }
    out
}

/// The history in replay order: by resourceVersion, a vanished object's drop right after its
/// last version, each version once (a relist delivers versions already seen again).
pub fn ordered(log: &[Seen]) -> Vec<&Seen> {
    let mut log: Vec<&Seen> = log.iter().collect();
    log.sort_by_key(|s| (s.rv, s.vanished, s.gone));
    log.dedup_by(|a, b| {
        a.rv == b.rv && a.uid == b.uid && a.gone == b.gone && a.vanished == b.vanished
    });
    log
}

/// Judges the history `log` (any order). `events` are only quoted next to violations.
pub fn judge(
    log: &[Seen],
    events: &[Event],
    rules: &Rules,
    now: Instant,
    bound: Duration,
) -> Verdict {
    let log = ordered(log);
    let mut replay = Replay {
        rules,
        events,
        live: BTreeMap::new(),
        versions: BTreeMap::new(),
        ended: BTreeSet::new(),
        reported: BTreeSet::new(),
        handoffs: Vec::new(),
        gaps: BTreeMap::new(),
        all: BTreeMap::new(),
        out: Verdict::default(),
    };
    for s in &log {
        replay.all.entry(s.uid.as_str()).or_default().push(s.rv);
        if s.after_gap {
            replay.gaps.entry(s.uid.as_str()).or_default().push(s.rv);
        }
    }
    for s in &log {
        replay.step(s);
    }
    let mut out = replay.out;
    out.violations.extend(
        replay
            .handoffs
            .into_iter()
            .map(|h| format!("{}; the old one was never retired", h.what)),
    );
    out.violations.extend(convergence(&log, now, bound));
    out
}
