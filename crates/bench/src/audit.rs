//! Counting one user's API requests in the apiserver's JSON-lines audit log.
//!
//! A scenario remembers the log's length when it starts and counts the events appended until it
//! ends. Every request is counted exactly once: a long-running request (a watch) at its
//! `ResponseStarted` event, which is written when the watch opens, anything else at
//! `ResponseComplete` (or `Panic`). The `RequestReceived` stage is omitted by the policy.

use anyhow::{Context, Result};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// Verbs that change state.
pub const WRITE_VERBS: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];

/// An audit policy that records only `user`'s requests, at Metadata level, so the simulator's and
/// the benchmark's own traffic cost the apiserver nothing extra.
pub fn policy_for(user: &str) -> String {
    format!(
        "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    users: [\"{user}\"]
  - level: None
"
    )
}

#[derive(Deserialize)]
struct Event {
    #[serde(default)]
    stage: String,
    #[serde(default)]
    verb: String,
    #[serde(default)]
    user: User,
    #[serde(default, rename = "objectRef")]
    object_ref: Option<ObjectRef>,
}

/// A line's request time, read only for the patches [`child_patches_since`] collects.
#[derive(Deserialize)]
struct Received {
    #[serde(rename = "requestReceivedTimestamp")]
    received: String,
}

#[derive(Deserialize, Default)]
struct User {
    #[serde(default)]
    username: String,
}

#[derive(Deserialize)]
struct ObjectRef {
    #[serde(default)]
    resource: String,
    #[serde(default)]
    subresource: Option<String>,
    #[serde(default)]
    name: Option<String>,
}

/// Requests of one user, by verb and by `resource[/subresource]` for writes.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Counts {
    pub by_verb: BTreeMap<String, u64>,
    pub writes_by_resource: BTreeMap<String, u64>,
    /// Writes a PipelineRollout caused, by its name: to the rollout and its status, to its
    /// Pipelines (`<rollout>-<index>`) and Events about it (`<rollout>.<suffix>`). Keys of other
    /// objects (MonoVertexRollouts' Events, say) are filtered out by the reader.
    pub pipeline_rollout_writes: BTreeMap<String, u64>,
}

impl Counts {
    pub fn total(&self) -> u64 {
        self.by_verb.values().sum()
    }

    pub fn watches(&self) -> u64 {
        self.by_verb.get("watch").copied().unwrap_or(0)
    }

    pub fn writes(&self) -> u64 {
        WRITE_VERBS
            .iter()
            .filter_map(|v| self.by_verb.get(*v))
            .sum()
    }

    /// Writes caused by the PipelineRollout `name` (see [`Counts::pipeline_rollout_writes`]).
    pub fn writes_of_pipeline_rollout(&self, name: &str) -> u64 {
        self.pipeline_rollout_writes.get(name).copied().unwrap_or(0)
    }

    /// Adds one audit line; lines of other users, other stages or that do not parse are ignored.
    pub fn add_line(&mut self, user: &str, line: &str) {
        let Ok(ev) = serde_json::from_str::<Event>(line) else {
            return;
        };
        if ev.user.username != user {
            return;
        }
        let counted = if ev.verb == "watch" {
            ev.stage == "ResponseStarted"
        } else {
            ev.stage == "ResponseComplete" || ev.stage == "Panic"
        };
        if !counted {
            return;
        }
        if WRITE_VERBS.contains(&ev.verb.as_str()) {
            let resource = match &ev.object_ref {
                Some(o) => match &o.subresource {
                    Some(s) => format!("{}/{s}", o.resource),
                    None => o.resource.clone(),
                },
                None => "(none)".into(),
            };
            if let Some(owner) = ev.object_ref.as_ref().and_then(pipeline_rollout_of) {
                *self.pipeline_rollout_writes.entry(owner).or_default() += 1;
            }
            *self.writes_by_resource.entry(resource).or_default() += 1;
        }
        *self.by_verb.entry(ev.verb).or_default() += 1;
    }

    /// Counts the complete lines of `text`.
    pub fn from_text(user: &str, text: &str) -> Self {
        let mut c = Counts::default();
        for line in text.lines() {
            c.add_line(user, line);
        }
        c
    }
}

/// The PipelineRollout a written object belongs to, going by the names Numaplane gives.
fn pipeline_rollout_of(o: &ObjectRef) -> Option<String> {
    let name = o.name.as_deref()?;
    let owner = match o.resource.as_str() {
        "pipelinerollouts" => name,
        "pipelines" => name.rsplit_once('-')?.0,
        "events" => name.rsplit_once('.')?.0,
        _ => return None,
    };
    Some(owner.to_string())
}

/// The current length of the audit log (a scenario's starting mark).
pub fn mark(path: &Path) -> Result<u64> {
    Ok(std::fs::metadata(path)
        .with_context(|| format!("reading {}", path.display()))?
        .len())
}

/// Counts `user`'s requests appended to the log since `from` (up to the last complete line).
pub fn count_since(path: &Path, from: u64, user: &str) -> Result<Counts> {
    let mut f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    // A log shorter than the mark was rotated away under us: its requests are lost, not zero.
    if f.metadata()?.len() < from {
        anyhow::bail!(
            "{} shrank below the scenario's start: the apiserver rotated it",
            path.display()
        );
    }
    f.seek(SeekFrom::Start(from))?;
    let mut text = String::new();
    f.read_to_string(&mut text)
        .with_context(|| format!("reading {}", path.display()))?;
    // A line still being written has no newline yet: leave it out.
    let complete = text.rfind('\n').map_or("", |i| &text[..=i]);
    Ok(Counts::from_text(user, complete))
}

/// When the API server received each of `user`'s patches of a Pipeline or MonoVertex (not a
/// subresource) appended to the log since `from`, by object name, in seconds since the epoch:
/// when Numaplane's writes went out, without a watcher's delay in seeing them.
pub fn child_patches_since(
    path: &Path,
    from: u64,
    user: &str,
) -> Result<BTreeMap<String, Vec<f64>>> {
    let mut f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    f.seek(SeekFrom::Start(from))?;
    let mut text = String::new();
    f.read_to_string(&mut text)
        .with_context(|| format!("reading {}", path.display()))?;
    Ok(child_patches(user, &text))
}

fn child_patches(user: &str, text: &str) -> BTreeMap<String, Vec<f64>> {
    let mut out: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for line in text.lines() {
        let Ok(ev) = serde_json::from_str::<Event>(line) else {
            continue;
        };
        let Some(o) = ev.object_ref.as_ref() else {
            continue;
        };
        if ev.user.username != user
            || ev.verb != "patch"
            || ev.stage != "ResponseComplete"
            || o.subresource.is_some()
            || !matches!(o.resource.as_str(), "pipelines" | "monovertices")
        {
            continue;
        }
        let at = serde_json::from_str::<Received>(line)
            .ok()
            .and_then(|r| r.received.parse::<k8s_openapi::jiff::Timestamp>().ok());
        if let (Some(name), Some(at)) = (&o.name, at) {
            out.entry(name.clone())
                .or_default()
                .push(at.as_microsecond() as f64 / 1e6);
        }
    }
    for times in out.values_mut() {
        times.sort_by(f64::total_cmp);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const OP: &str = "system:serviceaccount:numaplane-system:numaplane-sa";
    const ADMIN: &str = "testenv-admin";
    const DONE: &str = "ResponseComplete";
    const OPENED: &str = "ResponseStarted";

    fn line(stage: &str, verb: &str, user: &str, resource: &str, sub: Option<&str>) -> String {
        named(stage, verb, user, resource, sub, "x")
    }

    fn named(
        stage: &str,
        verb: &str,
        user: &str,
        resource: &str,
        sub: Option<&str>,
        name: &str,
    ) -> String {
        let mut obj = serde_json::json!({"resource": resource, "namespace": "ns", "name": name});
        if let Some(s) = sub {
            obj["subresource"] = s.into();
        }
        serde_json::json!({
            "kind": "Event", "level": "Metadata", "auditID": "a", "stage": stage,
            "verb": verb, "user": {"username": user, "groups": ["g"]}, "objectRef": obj,
            "responseStatus": {"code": 200}
        })
        .to_string()
    }

    #[test]
    fn counts_each_request_once_by_verb_and_write_resource() {
        let lines = [
            // A watch appears twice (opened, closed); counted when it opens.
            line(OPENED, "watch", OP, "pipelines", None),
            line(DONE, "watch", OP, "pipelines", None),
            line(DONE, "list", OP, "pipelines", None),
            line(DONE, "get", OP, "pipelines", None),
            line(DONE, "patch", OP, "pipelinerollouts", Some("status")),
            line(DONE, "patch", OP, "pipelinerollouts", None),
            line(DONE, "create", OP, "pipelines", None),
            line(DONE, "create", OP, "events", None),
            line(DONE, "delete", OP, "pipelines", None),
            // Someone else's requests are not ours.
            line(DONE, "create", ADMIN, "pipelines", None),
            line(OPENED, "watch", ADMIN, "pipelines", None),
        ];
        let c = Counts::from_text(OP, &lines.join("\n"));
        assert_eq!(c.watches(), 1);
        assert_eq!(c.total(), 8);
        assert_eq!(c.writes(), 5);
        assert_eq!(c.by_verb["patch"], 2);
        assert_eq!(c.writes_by_resource["pipelinerollouts/status"], 1);
        assert_eq!(c.writes_by_resource["pipelines"], 2);
        assert_eq!(c.writes_by_resource["pipelinerollouts"], 1);
        assert_eq!(c.writes_by_resource["events"], 1);
    }

    #[test]
    fn attributes_writes_to_the_pipeline_rollout_that_caused_them() {
        let lines = [
            named(DONE, "patch", OP, "pipelinerollouts", None, "pr-0001"),
            named(DONE, "create", OP, "pipelines", None, "pr-0001-0"),
            named(
                DONE,
                "create",
                OP,
                "events",
                None,
                "pr-0001.18ed1cce790f3369",
            ),
            named(
                DONE,
                "patch",
                OP,
                "pipelinerollouts",
                Some("status"),
                "pr-0001",
            ),
            named(
                DONE,
                "patch",
                OP,
                "pipelinerollouts",
                Some("status"),
                "pr-0002",
            ),
            // Reads are not writes; other kinds are not a PipelineRollout's.
            named(DONE, "get", OP, "pipelines", None, "pr-0001-0"),
            named(DONE, "create", OP, "monovertices", None, "pr-0001-0"),
            named(DONE, "create", ADMIN, "pipelines", None, "pr-0001-1"),
        ];
        let c = Counts::from_text(OP, &lines.join("\n"));
        assert_eq!(c.writes_of_pipeline_rollout("pr-0001"), 4);
        assert_eq!(c.writes_of_pipeline_rollout("pr-0002"), 1);
        assert_eq!(c.writes_of_pipeline_rollout("pr-0003"), 0);
    }

    #[test]
    fn ignores_garbage_and_partial_lines() {
        let full = line(DONE, "update", OP, "pipelinerollouts", None);
        let text = format!("not json\n{full}\n{}", &full[..20]);
        let c = Counts::from_text(OP, &text);
        assert_eq!(c.writes(), 1);
        assert_eq!(c.total(), 1);
    }

    #[test]
    fn count_since_reads_only_new_complete_lines() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("audit.log");
        let old = line(DONE, "create", OP, "pipelines", None);
        std::fs::write(&path, format!("{old}\n")).expect("write");
        let from = mark(&path).expect("mark");
        let new = line(DONE, "get", OP, "pipelines", None);
        let partial = &old[..30];
        std::fs::write(&path, format!("{old}\n{new}\n{partial}")).expect("write");
        let c = count_since(&path, from, OP).expect("count");
        assert_eq!(c.total(), 1);
        assert_eq!(c.by_verb["get"], 1);
        assert_eq!(c.writes(), 0);
        // Rotated: the new file is shorter than the mark.
        std::fs::write(&path, format!("{new}\n")).expect("write");
        let err = count_since(&path, from + 1_000, OP).expect_err("rotated");
        assert!(err.to_string().contains("rotated"), "{err}");
    }

    #[test]
    fn child_patches_are_the_operators_patches_of_pipelines_and_monovertices() {
        let at = |l: String, t: &str| {
            let mut v: serde_json::Value = serde_json::from_str(&l).expect("json");
            v["requestReceivedTimestamp"] = t.into();
            v.to_string()
        };
        let text = [
            at(
                named(DONE, "patch", OP, "pipelines", None, "p-1"),
                "2026-12-05T16:04:33.757000Z",
            ),
            at(
                named(DONE, "patch", OP, "pipelines", None, "p-1"),
                "2026-12-05T16:04:33.500000Z",
            ),
            at(
                named(DONE, "patch", OP, "monovertices", None, "m-1"),
                "2026-12-05T16:04:34.000000Z",
            ),
            // Not the operator's, not a patch, a subresource, another kind, not finished.
            at(
                named(DONE, "patch", ADMIN, "pipelines", None, "p-1"),
                "2026-12-05T16:04:30Z",
            ),
            at(
                named(DONE, "get", OP, "pipelines", None, "p-1"),
                "2026-12-05T16:04:30Z",
            ),
            at(
                named(DONE, "patch", OP, "pipelines", Some("status"), "p-1"),
                "2026-12-05T16:04:30Z",
            ),
            at(
                named(DONE, "patch", OP, "pipelinerollouts", None, "p"),
                "2026-12-05T16:04:30Z",
            ),
            at(
                named(OPENED, "patch", OP, "pipelines", None, "p-1"),
                "2026-12-05T16:04:30Z",
            ),
        ]
        .join("\n");
        let got = child_patches(OP, &text);
        let p0 = 1_796_486_673.5;
        assert_eq!(got.len(), 2, "{got:?}");
        let p1 = &got["p-1"];
        assert_eq!(p1.len(), 2);
        assert!(
            (p1[0] - p0).abs() < 1e-3 && (p1[1] - (p0 + 0.257)).abs() < 1e-3,
            "{p1:?}"
        );
        assert!((got["m-1"][0] - (p0 + 0.5)).abs() < 1e-3);
    }

    #[test]
    fn policy_names_the_user() {
        let p = policy_for(OP);
        assert!(p.contains(&format!("users: [\"{OP}\"]")));
        assert!(p.trim_end().ends_with("level: None"));
    }
}
