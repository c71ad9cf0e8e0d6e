//! Status writes held back while a child catches up with what we wrote, so that the rollout's
//! status goes out once, with the child's reaction, instead of "progressing" and then again.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

/// How long a status write may be held back: the child's reaction usually arrives within it.
/// Meanwhile `observedGeneration` still shows the change as not yet observed. 60 s because a
/// Numaflow controller working through a thousand new pipelines leaves one unobserved, or
/// progressing untouched, for 30 s and more; a shorter hold would only write "progressing" and
/// then write again once the child settles.
pub const STATUS_HOLD: Duration = Duration::from_secs(60);

struct Held {
    /// When the hold began: a child that keeps changing cannot stretch it.
    first: Instant,
    /// The newest status held back; the base of the next pass, so nothing it recorded is lost.
    status: serde_json::Value,
}

/// The holds of every rollout, by UID.
#[derive(Default)]
pub struct StatusHolds(Mutex<HashMap<String, Held>>);

impl StatusHolds {
    /// Holds back the write of `status` for `uid` (starting the hold now if none runs) and
    /// returns how long is left; `None` once [`STATUS_HOLD`] has passed since the hold began and
    /// the write must go out.
    pub fn hold<S: serde::Serialize>(&self, uid: &str, status: &S) -> Option<Duration> {
        self.hold_at(uid, status, Instant::now())
    }

    fn hold_at<S: serde::Serialize>(
        &self,
        uid: &str,
        status: &S,
        now: Instant,
    ) -> Option<Duration> {
        let value = serde_json::to_value(status).ok()?;
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let held = m.entry(uid.to_string()).or_insert_with(|| Held {
            first: now,
            status: serde_json::Value::Null,
        });
        held.status = value;
        let left = STATUS_HOLD.saturating_sub(now.saturating_duration_since(held.first));
        (!left.is_zero()).then_some(left)
    }

    /// The status held back for `uid`, if any: newer than the cached one.
    pub fn held<S: serde::de::DeserializeOwned>(&self, uid: &str) -> Option<S> {
        let m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        serde_json::from_value(m.get(uid)?.status.clone()).ok()
    }

    /// Ends any hold of `uid`'s status (it was written, or needs no write).
    pub fn release(&self, uid: &str) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_hold_keeps_the_newest_status_and_ends_a_fixed_time_after_it_began() {
        let holds = StatusHolds::default();
        let t0 = Instant::now();
        let s = Duration::from_secs;
        assert_eq!(holds.hold_at("a", &json!({"n": 1}), t0), Some(STATUS_HOLD));
        // Later passes (the child moving on) neither restart nor stretch it...
        assert_eq!(
            holds.hold_at("a", &json!({"n": 2}), t0 + s(45)),
            Some(STATUS_HOLD - s(45))
        );
        assert_eq!(holds.held::<serde_json::Value>("a"), Some(json!({"n": 2})));
        // ...and once it has run its time the write goes out.
        assert_eq!(holds.hold_at("a", &json!({"n": 3}), t0 + STATUS_HOLD), None);
        // Another rollout's hold is its own.
        assert_eq!(
            holds.hold_at("b", &json!({}), t0 + STATUS_HOLD),
            Some(STATUS_HOLD)
        );
        // Released (written): the next hold starts afresh.
        holds.release("a");
        assert_eq!(holds.held::<serde_json::Value>("a"), None);
        assert_eq!(
            holds.hold_at("a", &json!({"n": 4}), t0 + STATUS_HOLD),
            Some(STATUS_HOLD)
        );
    }
}
