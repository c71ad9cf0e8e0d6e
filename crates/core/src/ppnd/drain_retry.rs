//! Draining again: a pipeline asked to pause for an update that deletes its buffers (an ISB
//! service recreate) must end Paused with `drainedOnPause`. Numaflow marks a pipeline Paused
//! without draining once its pause grace period ends (a slow vertex, a restart mid-pause), and
//! nothing drains it after that: its vertices are scaled to zero. So the pipeline is resumed and
//! paused again, a bounded number of times; after the last attempt Numaplane holds and the
//! requesting rollout says which pipelines keep it waiting (docs/strategies.md).

/// How many times a pipeline that paused without draining is resumed to drain again.
pub const DRAIN_ATTEMPTS: u32 = 3;

/// The live pipeline as the retry looks at it.
#[derive(Debug, Clone, Copy)]
pub struct Paused<'a> {
    /// The live spec asks for `Paused`.
    pub live_wants_paused: bool,
    /// The live `status.phase`.
    pub phase: &'a str,
    /// The live `status.drainedOnPause`.
    pub drained_on_pause: Option<bool>,
    /// Resumes for a drain so far in this pause request (the annotation on the live pipeline).
    pub attempts: u32,
    /// The rollout's own spec asks for `Paused`: never resumed against the user's wish.
    pub user_wants_paused: bool,
}

/// What the desired pipeline asks for while a pause request needs it drained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainRetry {
    /// Paused, as the request asks (`attempts` carried on).
    Pause { attempts: u32 },
    /// Running: a resume to drain again, attempt `attempts` (begun now or still under way).
    Resume { attempts: u32 },
}

/// The next desired phase of a pipeline whose pause request needs it drained.
pub fn decide(p: &Paused<'_>) -> DrainRetry {
    let attempts = p.attempts;
    if p.user_wants_paused {
        return DrainRetry::Pause { attempts };
    }
    // A resume under way: kept until Numaflow reports it Running, so the next pause is a new
    // one (a new pause timestamp, a new drain).
    if !p.live_wants_paused && attempts > 0 && matches!(p.phase, "Paused" | "Pausing") {
        return DrainRetry::Resume { attempts };
    }
    let undrained = p.live_wants_paused && p.phase == "Paused" && p.drained_on_pause != Some(true);
    if undrained && attempts < DRAIN_ATTEMPTS {
        return DrainRetry::Resume {
            attempts: attempts + 1,
        };
    }
    DrainRetry::Pause { attempts }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(wants_paused: bool, phase: &str, drained: Option<bool>, attempts: u32) -> Paused<'_> {
        Paused {
            live_wants_paused: wants_paused,
            phase,
            drained_on_pause: drained,
            attempts,
            user_wants_paused: false,
        }
    }

    #[test]
    fn a_running_pipeline_is_paused() {
        assert_eq!(
            decide(&live(false, "Running", None, 0)),
            DrainRetry::Pause { attempts: 0 }
        );
    }

    #[test]
    fn pausing_or_drained_is_left_paused() {
        assert_eq!(
            decide(&live(true, "Pausing", Some(false), 0)),
            DrainRetry::Pause { attempts: 0 }
        );
        assert_eq!(
            decide(&live(true, "Paused", Some(true), 1)),
            DrainRetry::Pause { attempts: 1 }
        );
    }

    #[test]
    fn paused_without_draining_is_resumed_to_drain_again() {
        assert_eq!(
            decide(&live(true, "Paused", Some(false), 0)),
            DrainRetry::Resume { attempts: 1 }
        );
        // Numaflow 1.x leaves `drainedOnPause` out until it is true.
        assert_eq!(
            decide(&live(true, "Paused", None, 1)),
            DrainRetry::Resume { attempts: 2 }
        );
    }

    #[test]
    fn a_resume_under_way_is_kept_until_running_then_paused_again() {
        assert_eq!(
            decide(&live(false, "Paused", Some(false), 1)),
            DrainRetry::Resume { attempts: 1 }
        );
        assert_eq!(
            decide(&live(false, "Running", None, 1)),
            DrainRetry::Pause { attempts: 1 }
        );
        // A pipeline that failed instead of resuming is not held running.
        assert_eq!(
            decide(&live(false, "Failed", None, 1)),
            DrainRetry::Pause { attempts: 1 }
        );
    }

    #[test]
    fn after_the_last_attempt_it_stays_paused() {
        assert_eq!(
            decide(&live(true, "Paused", Some(false), DRAIN_ATTEMPTS)),
            DrainRetry::Pause {
                attempts: DRAIN_ATTEMPTS
            }
        );
    }

    #[test]
    fn a_pause_the_user_asked_for_is_never_resumed() {
        let mut p = live(true, "Paused", Some(false), 0);
        p.user_wants_paused = true;
        assert_eq!(decide(&p), DrainRetry::Pause { attempts: 0 });
    }
}
