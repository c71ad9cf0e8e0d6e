//! Steps that fall due go first. A rollout whose engine scheduled a step for a moment (a
//! progressive verdict at the end of its healthy period or assessment window, a recycling
//! deadline) is woken at that moment, and then waits for a worker like any other pass. When
//! many verdicts fall due in the same second (every trial of a mass upgrade came up at once),
//! the passes their own promotions set off (restoring scale, draining and deleting the replaced
//! children) took the workers and the API server from the verdicts still waiting: at N=1000 the
//! last promotions of a burst came seconds late. So while another rollout's step is due and not
//! yet taken, an ordinary pass steps aside for a moment (it reads nothing and writes nothing
//! before), never for longer than [`MAX_DEFER`] in all.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long an ordinary pass steps aside at a time.
pub const STEP_ASIDE: Duration = Duration::from_millis(100);
/// The most an ordinary pass is put off, however many steps keep falling due.
pub const MAX_DEFER: Duration = Duration::from_secs(1);
/// A due step not taken this long after its moment is no longer waited for (its rollout was
/// deleted, or its pass failed before it could say when to look again).
const STALE: Duration = Duration::from_secs(5);

#[derive(Default)]
struct Inner {
    /// By rollout UID: when its scheduled step falls due.
    due: HashMap<String, Instant>,
    /// By rollout UID: when its pass first stepped aside.
    deferred: HashMap<String, Instant>,
}

#[derive(Default)]
pub struct DueSteps(Mutex<Inner>);

impl DueSteps {
    /// The step `uid`'s pass scheduled falls due at `at` (`None`: it scheduled none).
    pub fn schedule(&self, uid: &str, at: Option<Instant>) {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match at {
            Some(at) => m.due.insert(uid.to_string(), at),
            None => m.due.remove(uid),
        };
    }

    /// Whether the pass of `uid` starting at `now` steps aside, and for how long: not when its
    /// own step is due, nor when no other is waiting, nor once it has been put off for
    /// [`MAX_DEFER`].
    pub fn defer(&self, uid: &str, now: Instant) -> Option<Duration> {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let is_due = |at: &Instant| *at <= now && now.saturating_duration_since(*at) < STALE;
        if m.due.get(uid).is_some_and(is_due) {
            // Taken: its pass says when the next one falls due.
            m.due.remove(uid);
            m.deferred.remove(uid);
            return None;
        }
        if !m.due.values().any(is_due) {
            m.deferred.remove(uid);
            return None;
        }
        let first = *m.deferred.entry(uid.to_string()).or_insert(now);
        if now.saturating_duration_since(first) >= MAX_DEFER {
            m.deferred.remove(uid);
            return None;
        }
        Some(STEP_ASIDE)
    }

    /// `uid` is gone.
    pub fn forget(&self, uid: &str) {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        m.due.remove(uid);
        m.deferred.remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn ordinary_passes_step_aside_while_another_step_is_due_for_at_most_a_second() {
        let due = DueSteps::default();
        let t0 = Instant::now();
        due.schedule("verdict", Some(t0 + MS(500)));
        // Not due yet: nobody waits.
        assert_eq!(due.defer("other", t0), None);
        // Due and not taken: others step aside, the due one goes.
        assert_eq!(due.defer("other", t0 + MS(600)), Some(STEP_ASIDE));
        assert_eq!(due.defer("verdict", t0 + MS(650)), None);
        // Its pass scheduled nothing more: the others go.
        due.schedule("verdict", None);
        assert_eq!(due.defer("other", t0 + MS(700)), None);
        // Steps that keep falling due put an ordinary pass off for MAX_DEFER at most.
        due.schedule("a", Some(t0 + MS(1000)));
        assert_eq!(due.defer("other", t0 + MS(1000)), Some(STEP_ASIDE));
        due.schedule("b", Some(t0 + MS(1500)));
        assert_eq!(due.defer("other", t0 + MS(1600)), Some(STEP_ASIDE));
        assert_eq!(due.defer("other", t0 + MS(1000) + MAX_DEFER), None);
    }

    #[test]
    fn a_step_never_taken_stops_holding_others_up() {
        let due = DueSteps::default();
        let t0 = Instant::now();
        due.schedule("deleted", Some(t0));
        assert_eq!(due.defer("other", t0 + MS(10)), Some(STEP_ASIDE));
        assert_eq!(due.defer("late", t0 + STALE), None);
        due.schedule("gone", Some(t0 + STALE));
        due.forget("gone");
        assert_eq!(due.defer("late", t0 + STALE + MS(1)), None);
    }
}
