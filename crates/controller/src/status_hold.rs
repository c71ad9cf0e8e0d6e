//! Status writes held back while a child catches up with what we wrote, so that the rollout's
//! status goes out once, with the child's reaction, instead of "progressing" and then again.

use std::{
    collections::{HashMap, VecDeque},
    sync::Mutex,
    time::{Duration, Instant},
};

/// How long a status write may be held back: the child's reaction usually arrives within it.
/// Meanwhile `observedGeneration` still shows the change as not yet observed. 60 s because a
/// Numaflow controller working through a thousand new pipelines leaves one unobserved, or
/// progressing untouched, for 30 s and more; a shorter hold would only write "progressing" and
/// then write again once the child settles.
pub const STATUS_HOLD: Duration = Duration::from_secs(60);

/// A hold goes on past [`STATUS_HOLD`] for a child queued in a backlog of the namespace's
/// Numaflow controller, while that controller keeps settling held children: one within this.
/// A controller that is down or stuck settles nothing, and its rollouts report at
/// [`STATUS_HOLD`] as before.
pub const PROGRESS_WINDOW: Duration = Duration::from_secs(10);

/// No hold lasts longer than this, however long the backlog: a rollout's status may lag its
/// child by at most this much. (Ten thousand new pipelines at once keep a Numaflow controller
/// busy for about ten minutes on the benchmark's two cores.)
pub const MAX_HOLD: Duration = Duration::from_secs(600);

/// A backlog: at least this many children held at once in the namespace, and more than its
/// controller settled in the last [`STATUS_HOLD`] (so a child may well wait longer than that in
/// its queue). Fewer cannot keep a Numaflow controller busy for a minute, so a few children it
/// cannot handle among others it settles make none, and report at [`STATUS_HOLD`].
pub const BACKLOG_MIN: usize = 100;

struct Held {
    /// When the hold began: a child that keeps changing cannot stretch it.
    first: Instant,
    /// Held while the namespace had a backlog: the child is in the controller's queue. Kept
    /// once seen, because the backlog stops counting as one while its last minute's worth
    /// drains (in whatever order the controller takes it: a kube-runtime queue under load
    /// serves the newest first), and those last children still wait their turn.
    queued: bool,
    namespace: String,
    /// The newest status held back, as JSON text (thousands may be held at once); the base of
    /// the next pass, so nothing it recorded is lost.
    status: String,
}

/// One namespace's backlog, as the holds see it.
#[derive(Default)]
struct Backlog {
    /// Holds running.
    held: usize,
    /// When held children settled, within the last [`STATUS_HOLD`].
    settles: VecDeque<Instant>,
}

impl Backlog {
    fn forget_before(&mut self, now: Instant) {
        while self
            .settles
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= STATUS_HOLD)
        {
            self.settles.pop_front();
        }
    }

    /// The controller settled a held child within [`PROGRESS_WINDOW`].
    fn progressing(&self, now: Instant) -> bool {
        self.settles
            .back()
            .is_some_and(|t| now.saturating_duration_since(*t) < PROGRESS_WINDOW)
    }

    /// The controller is making progress through a backlog (see [`BACKLOG_MIN`]).
    fn behind(&self, now: Instant) -> bool {
        self.progressing(now) && self.held >= BACKLOG_MIN && self.held > self.settles.len()
    }
}

#[derive(Default)]
struct Holds {
    by_uid: HashMap<String, Held>,
    by_namespace: HashMap<String, Backlog>,
}

impl Holds {
    fn end(&mut self, uid: &str, settled_at: Option<Instant>) {
        let Some(held) = self.by_uid.remove(uid) else {
            return;
        };
        let backlog = self.by_namespace.entry(held.namespace).or_default();
        backlog.held = backlog.held.saturating_sub(1);
        if let Some(now) = settled_at {
            backlog.forget_before(now);
            backlog.settles.push_back(now);
        }
    }
}

/// The holds of every rollout, by UID.
#[derive(Default)]
pub struct StatusHolds(Mutex<Holds>);

impl StatusHolds {
    /// Holds back the write of `status` for `uid` in `namespace` (starting the hold now if none
    /// runs) and returns how long is left; `None` once the hold has run its time and the write
    /// must go out: [`STATUS_HOLD`] after it began, longer for a child queued in a backlog its
    /// namespace's controller is working through (see [`PROGRESS_WINDOW`], [`BACKLOG_MIN`]),
    /// never past [`MAX_HOLD`].
    pub fn hold<S: serde::Serialize>(
        &self,
        uid: &str,
        namespace: &str,
        status: &S,
    ) -> Option<Duration> {
        self.hold_at(uid, namespace, status, Instant::now())
    }

    fn hold_at<S: serde::Serialize>(
        &self,
        uid: &str,
        namespace: &str,
        status: &S,
        now: Instant,
    ) -> Option<Duration> {
        let value = serde_json::to_string(status).ok()?;
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let Holds {
            by_uid,
            by_namespace,
        } = &mut *m;
        let backlog = by_namespace.entry(namespace.to_string()).or_default();
        let held = by_uid.entry(uid.to_string()).or_insert_with(|| {
            backlog.held += 1;
            Held {
                first: now,
                queued: false,
                namespace: namespace.to_string(),
                status: String::new(),
            }
        });
        held.status = value;
        backlog.forget_before(now);
        held.queued |= backlog.behind(now);
        let elapsed = now.saturating_duration_since(held.first);
        if elapsed < STATUS_HOLD {
            return Some(STATUS_HOLD - elapsed);
        }
        // Past the usual hold only for a child queued in a backlog the controller is working
        // through; looked at again when that evidence would lapse (the child settling wakes the
        // rollout sooner).
        (held.queued && backlog.progressing(now) && elapsed < MAX_HOLD)
            .then(|| PROGRESS_WINDOW.min(MAX_HOLD - elapsed))
    }

    /// The status held back for `uid`, if any: newer than the cached one.
    pub fn held<S: serde::de::DeserializeOwned>(&self, uid: &str) -> Option<S> {
        let m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        serde_json::from_str(&m.by_uid.get(uid)?.status).ok()
    }

    /// Ends any hold of `uid`'s status (it was written, or needs no write).
    pub fn release(&self, uid: &str) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .end(uid, None);
    }

    /// Ends `uid`'s hold because its child settled: if a hold ran, its namespace's controller
    /// made progress.
    pub fn settled(&self, uid: &str) {
        self.settled_at(uid, Instant::now());
    }

    fn settled_at(&self, uid: &str, now: Instant) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .end(uid, Some(now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn a_hold_keeps_the_newest_status_and_ends_a_fixed_time_after_it_began() {
        let holds = StatusHolds::default();
        let t0 = Instant::now();
        assert_eq!(
            holds.hold_at("a", "ns", &json!({"n": 1}), t0),
            Some(STATUS_HOLD)
        );
        // Later passes (the child moving on) neither restart nor stretch it...
        assert_eq!(
            holds.hold_at("a", "ns", &json!({"n": 2}), t0 + S(45)),
            Some(STATUS_HOLD - S(45))
        );
        assert_eq!(holds.held::<serde_json::Value>("a"), Some(json!({"n": 2})));
        // ...and once it has run its time the write goes out.
        assert_eq!(
            holds.hold_at("a", "ns", &json!({"n": 3}), t0 + STATUS_HOLD),
            None
        );
        // Another rollout's hold is its own.
        assert_eq!(
            holds.hold_at("b", "ns", &json!({}), t0 + STATUS_HOLD),
            Some(STATUS_HOLD)
        );
        // Released (written): the next hold starts afresh.
        holds.release("a");
        assert_eq!(holds.held::<serde_json::Value>("a"), None);
        assert_eq!(
            holds.hold_at("a", "ns", &json!({"n": 4}), t0 + STATUS_HOLD),
            Some(STATUS_HOLD)
        );
    }

    /// Holds `count` children `prefix-0..` in `ns` at `at`.
    fn hold_many(holds: &StatusHolds, ns: &str, prefix: &str, count: usize, at: Instant) {
        for i in 0..count {
            holds.hold_at(&format!("{prefix}-{i}"), ns, &json!({}), at);
        }
    }

    #[test]
    fn a_hold_goes_on_while_the_namespace_s_controller_works_through_a_backlog_up_to_the_cap() {
        let holds = StatusHolds::default();
        let t0 = Instant::now();
        let status = json!({});
        // A backlog: a hundred and more children held, one settled just before the hold ran out.
        holds.hold_at("slow", "busy", &status, t0);
        hold_many(&holds, "busy", "c", BACKLOG_MIN, t0);
        holds.settled_at("c-0", t0 + S(55));
        assert_eq!(
            holds.hold_at("slow", "busy", &status, t0 + STATUS_HOLD),
            Some(PROGRESS_WINDOW)
        );
        // Once nothing has settled for the progress window, it ends.
        assert_eq!(
            holds.hold_at("slow", "busy", &status, t0 + S(55) + PROGRESS_WINDOW),
            None
        );
        // No progress at all (the controller down): the write goes out at 60 s.
        holds.hold_at("idle", "quiet", &status, t0);
        hold_many(&holds, "quiet", "q", BACKLOG_MIN, t0);
        assert_eq!(
            holds.hold_at("idle", "quiet", &status, t0 + STATUS_HOLD),
            None
        );
        // A release that was not a settle (written for another reason) is no progress.
        holds.hold_at("x", "other", &status, t0);
        hold_many(&holds, "other", "o", BACKLOG_MIN, t0);
        holds.release("o-0");
        assert_eq!(holds.hold_at("x", "other", &status, t0 + STATUS_HOLD), None);
        // However long the backlog, no hold passes the cap.
        let t1 = t0 + S(1000);
        holds.hold_at("capped", "long", &status, t1);
        hold_many(&holds, "long", "l", BACKLOG_MIN, t1);
        holds.settled_at("l-0", t1 + MAX_HOLD - S(5));
        assert_eq!(
            holds.hold_at("capped", "long", &status, t1 + MAX_HOLD - S(2)),
            Some(S(2))
        );
        assert_eq!(
            holds.hold_at("capped", "long", &status, t1 + MAX_HOLD),
            None
        );
    }

    #[test]
    fn a_child_queued_in_a_backlog_is_held_while_its_last_minute_drains() {
        let holds = StatusHolds::default();
        let t0 = Instant::now();
        let status = json!({});
        // 400 children queue up; the controller settles five a second, newest first, and
        // "early" is among the last it takes.
        holds.hold_at("early", "ns", &status, t0);
        hold_many(&holds, "ns", "c", 399, t0);
        let mut left = 399;
        let mut t = t0;
        while left > 0 {
            t += Duration::from_millis(200);
            left -= 1;
            holds.settled_at(&format!("c-{left}"), t);
            if t == t0 + S(30) {
                // Seen while the backlog was one: queued.
                assert!(holds.hold_at("early", "ns", &status, t).is_some());
            }
        }
        // At the end fewer are held than settled per minute, and the child has waited a
        // minute; it was queued and the controller is still settling, so it is still held.
        assert!(t >= t0 + STATUS_HOLD);
        assert_eq!(
            holds.hold_at("early", "ns", &status, t),
            Some(PROGRESS_WINDOW)
        );
        // Until the controller stops settling.
        assert_eq!(
            holds.hold_at("early", "ns", &status, t + PROGRESS_WINDOW),
            None
        );
    }

    #[test]
    fn a_few_children_waiting_on_a_slow_controller_are_no_backlog() {
        // Fewer than BACKLOG_MIN held, more than the controller settled in a minute: a handful
        // of children it cannot handle, not a queue worth waiting on.
        let holds = StatusHolds::default();
        let t0 = Instant::now();
        let status = json!({});
        holds.hold_at("stuck", "ns", &status, t0);
        hold_many(&holds, "ns", "c", BACKLOG_MIN - 2, t0);
        holds.settled_at("c-0", t0 + S(55));
        assert_eq!(
            holds.hold_at("stuck", "ns", &status, t0 + STATUS_HOLD),
            None
        );
    }

    #[test]
    fn a_child_stuck_among_many_that_settle_is_reported_at_the_usual_hold() {
        // The controller settles children faster than they queue up: one it cannot handle is
        // no backlog, and its rollout reports after STATUS_HOLD.
        let holds = StatusHolds::default();
        let t0 = Instant::now();
        let status = json!({});
        holds.hold_at("stuck", "ns", &status, t0);
        for i in 0..5 {
            let uid = format!("ok-{i}");
            holds.hold_at(&uid, "ns", &status, t0 + S(10 * i));
            holds.settled_at(&uid, t0 + S(10 * i + 2));
        }
        holds.hold_at("newer", "ns", &status, t0 + S(55));
        assert_eq!(
            holds.hold_at("stuck", "ns", &status, t0 + STATUS_HOLD),
            None
        );
    }
}
