//! The dashboard's table: one small row per rollout, derived from the object (pure). Only rows
//! are kept in memory, never the objects they came from, so memory grows with the number of
//! rollouts by a few hundred bytes each.

use numaplane_api::Kind;
use numaplane_api::keys::condition;
use serde::Serialize;
use serde_json::Value;

/// A rollout as the table shows it.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    /// `namespace/Kind/name`: unique across the table, stable across updates.
    pub key: String,
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    pub phase: String,
    /// `status.upgradeInProgress` (`Progressive`, `PipelinePauseAndDrain`), empty when none.
    pub strategy: String,
    /// What the rollout waits for (its status message), empty when it waits for nothing.
    pub waiting: String,
    /// When the wait ends at the latest, if the controller said (see [`deadline`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    /// `ChildResourcesHealthy`: True, False or Unknown.
    pub healthy: String,
    pub created: String,
}

fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or_default()
}

/// The key of a rollout of `kind` named `name` in `namespace`.
pub fn key(kind: Kind, namespace: &str, name: &str) -> String {
    format!("{namespace}/{}/{name}", kind.rollout_kind())
}

/// The row of a rollout object.
pub fn row(kind: Kind, v: &Value) -> Row {
    let namespace = s(v, "/metadata/namespace").to_string();
    let name = s(v, "/metadata/name").to_string();
    let phase = s(v, "/status/phase").to_string();
    let strategy = s(v, "/status/upgradeInProgress").to_string();
    let message = s(v, "/status/message");
    let generation = v.pointer("/metadata/generation").and_then(Value::as_i64);
    let observed = v
        .pointer("/status/observedGeneration")
        .and_then(Value::as_i64);
    let caught_up = generation.is_none() || generation == observed;
    let settled = phase == "Deployed" && strategy.is_empty() && caught_up;
    let waiting = if settled {
        String::new()
    } else if !caught_up {
        // The message describes an older generation.
        format!(
            "the controller to observe generation {}",
            generation.unwrap_or_default()
        )
    } else {
        message.to_string()
    };
    let healthy = v
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| {
            cs.iter()
                .find(|c| s(c, "/type") == condition::CHILD_RESOURCES_HEALTHY)
        })
        .map(|c| s(c, "/status").to_string())
        .unwrap_or_else(|| "Unknown".to_string());
    Row {
        key: key(kind, &namespace, &name),
        kind: kind.rollout_kind(),
        namespace,
        name,
        phase,
        until: (!settled).then(|| deadline(message)).flatten(),
        strategy,
        waiting,
        healthy,
        created: s(v, "/metadata/creationTimestamp").to_string(),
    }
}

/// When the wait ends at the latest, as the status message says it: the last RFC 3339 time
/// after "by", "until", "after" or "before" ("trial p-1: healthy since 2026-12-04T07:20:00Z,
/// succeeds at 2026-12-04T07:21:00Z if it stays healthy, must complete by 2026-12-04T07:30:00Z"). The message is the one place the controller states it (the
/// assessment window's end is not a status field until it has passed).
pub fn deadline(message: &str) -> Option<String> {
    let words: Vec<&str> = message.split_whitespace().collect();
    words
        .windows(2)
        .rev()
        .filter(|w| matches!(w[0], "by" | "until" | "after" | "before"))
        .find_map(|w| {
            let t = w[1].trim_end_matches([',', ';', ')', '.', ':']);
            chrono::DateTime::parse_from_rfc3339(t)
                .ok()
                .map(|_| t.to_string())
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pr(status: Value, generation: i64) -> Value {
        json!({
            "metadata": {"name": "p", "namespace": "ns", "generation": generation,
                         "creationTimestamp": "2026-12-01T00:00:00Z"},
            "status": status
        })
    }

    #[test]
    fn a_settled_rollout_waits_for_nothing() {
        let r = row(
            Kind::Pipeline,
            &pr(
                json!({"phase": "Deployed", "message": "Deployed", "observedGeneration": 2,
                       "conditions": [{"type": "ChildResourcesHealthy", "status": "True"}]}),
                2,
            ),
        );
        assert_eq!(r.key, "ns/PipelineRollout/p");
        assert_eq!((r.phase.as_str(), r.healthy.as_str()), ("Deployed", "True"));
        assert_eq!(r.waiting, "");
        assert_eq!(r.until, None);
        assert_eq!(r.created, "2026-12-01T00:00:00Z");
    }

    #[test]
    fn a_trial_waits_until_its_assessment_window_ends() {
        let status = json!({
            "phase": "Pending", "upgradeInProgress": "Progressive", "observedGeneration": 3,
            "message": "trial p-1: healthy since 2026-12-01T00:01:00Z, succeeds at 2026-12-01T00:02:00Z if it stays healthy, must complete by 2026-12-01T00:05:00Z",
        });
        let r = row(Kind::Pipeline, &pr(status, 3));
        assert_eq!(r.strategy, "Progressive");
        assert!(r.waiting.contains("healthy since"), "{}", r.waiting);
        assert_eq!(r.until.as_deref(), Some("2026-12-01T00:05:00Z"));
        assert_eq!(r.healthy, "Unknown");
    }

    #[test]
    fn deadlines_are_read_from_the_controllers_words() {
        for (message, want) in [
            (
                "trial p-1: unhealthy (x; y); must be healthy for 60s by 2026-12-01T00:05:00Z",
                Some("2026-12-01T00:05:00Z"),
            ),
            (
                "trial p-1: assessment starts after 2026-12-01T00:01:00Z",
                Some("2026-12-01T00:01:00Z"),
            ),
            (
                "trial p-1: waiting for AnalysisRun a (Running) until 2026-12-01T00:20:00Z.",
                Some("2026-12-01T00:20:00Z"),
            ),
            ("pause requested by ISBServiceRollout isb", None),
            (
                "pause-and-drain: waiting for pipeline p-0 to drain and pause",
                None,
            ),
            ("", None),
        ] {
            assert_eq!(deadline(message).as_deref(), want, "{message}");
        }
    }

    #[test]
    fn an_unobserved_generation_is_what_it_waits_for() {
        let r = row(Kind::MonoVertex, &pr(json!({}), 1));
        assert_eq!(r.waiting, "the controller to observe generation 1");
        let r = row(
            Kind::MonoVertex,
            &pr(
                json!({"phase": "Deployed", "message": "Deployed", "observedGeneration": 1}),
                2,
            ),
        );
        assert_eq!(r.waiting, "the controller to observe generation 2");
    }
}
