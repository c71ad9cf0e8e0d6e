//! Report: a pass's outcome becomes the rollout's status (written once, or held back while the
//! child settles), its Events, its metrics and the next wake-up.

use super::act::{Acted, Outcome};
use super::kind::{Rollout, publish};
use super::observation::{Trace, record_history, report_child};
use super::pass::Pass;
use crate::context::{Ctx, RESYNC};
use crate::error::Error;
use crate::status::{self, RolloutStatus};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use numaplane_api::Namespaced;
use numaplane_api::Subject;
use numaplane_api::keys;
use std::time::Duration;
use tracing::debug;

/// Re-check period while an upgrade strategy is in progress (the reference's default requeue):
/// a safety net behind the watch triggers, e.g. for an allow-data-loss annotation added to
/// another rollout.
pub(crate) const IN_PROGRESS_RECHECK: Duration = Duration::from_secs(20);

/// How soon a pass that waits for the cluster (a garbage collection) looks again.
const WAIT_RECHECK: Duration = Duration::from_secs(5);

impl<R: Rollout> Pass<'_, R> {
    /// Writes what the pass came to and says when to look again. (Long: the single place a
    /// pass's outcome becomes status, an Event and the next wake-up.)
    pub async fn finish(
        mut self,
        ctx: &Ctx,
        acted: Result<Acted<R::Child>, Error>,
    ) -> Result<Action, Error> {
        let obj = self.obj;
        let (generation, now) = (self.generation, self.now.clone());
        let st = &mut self.st;
        let (outcome, wake) = match acted {
            Ok(a) => (a.outcome, a.wake),
            // The cluster finishes it on its own (a garbage collection): pending, soon again.
            Err(e) if e.is_wait() => (
                Outcome::Waiting(e.to_string()),
                now.0.checked_add(WAIT_RECHECK).ok(),
            ),
            Err(e) => {
                status::mark_failed(st.common_mut(), &e, &now);
                st.common_mut().observed_generation = generation;
                publish(
                    &ctx.events,
                    obj,
                    EventType::Warning,
                    keys::event_reason::RECONCILE_FAILED,
                    format!("reconcile failed: {e}"),
                )
                .await;
                record_health::<R>(ctx, obj, st.common());
                obj.observe_metrics(ctx, st, &now);
                self.ledger.write(obj, ctx, st).await?;
                ctx.status_holds.release(&self.uid);
                return Err(e);
            }
        };
        // `reacted`: the child has caught up (what ends a hold early).
        let (settling, reacted, delay) = match outcome {
            Outcome::Waiting(message) => {
                status::mark_pending(st.common_mut(), &message);
                st.common_mut().observed_generation = generation;
                (true, false, RESYNC)
            }
            Outcome::Done {
                child,
                changed,
                pending,
                trace,
            } => {
                let settling =
                    report_child::<R>(ctx, st, &child, pending.as_deref(), generation, &now);
                st.common_mut().observed_generation = generation;
                record_history::<R>(ctx, st, self.strategy_before, &trace, generation, &now);
                ctx.metrics.upgrades_finished(
                    R::KIND,
                    &self.ns,
                    &self.name,
                    &self.before.common().upgrade_history,
                    &st.common().upgrade_history,
                );
                if changed {
                    self.changed(ctx, &trace).await;
                } else {
                    debug!("in sync, nothing to do");
                }
                let delay = if self.st.common().upgrade_in_progress == Default::default() {
                    RESYNC
                } else {
                    IN_PROGRESS_RECHECK
                };
                (pending.is_none() && settling, !settling, delay)
            }
        };
        status::note_usde_config(
            self.st.common_mut(),
            R::KIND,
            ctx.settings.usde().is_some(),
            ctx.settings.user_strategy(&self.ns),
            generation,
            &now,
        );
        let st = &self.st;
        record_health::<R>(ctx, obj, st.common());
        obj.observe_metrics(ctx, st, &now);
        // A deadline of the engine's (a trial's verdict, a recycling expiry) wakes the rollout
        // when it is due, held status or not; a verdict's own pass comes from the due steps'
        // lane first.
        let until_wake = wake.map(|w: Timestamp| {
            Duration::try_from(w.duration_since(status::now().0)).unwrap_or(Duration::ZERO)
                + crate::due_steps::WAKE_MARGIN
                + crate::due_steps::WORKER_AFTER_LANE
        });
        if self.before != *st
            && settling
            && holdable::<R>(&self.before, st)
            && let Some(left) = ctx.status_holds.hold(&self.uid, &self.ns, st)
        {
            debug!(?left, "child settling; status write held back");
            return Ok(Action::requeue(next_pass(left, until_wake)));
        }
        // Released only once written: a failed write keeps what the held status recorded.
        // Compared with what the API server has: a status recorded earlier in this pass (a
        // progressive record) may already say all of it.
        self.ledger.write(obj, ctx, st).await?;
        if reacted {
            ctx.status_holds.settled(&self.uid);
        } else {
            ctx.status_holds.release(&self.uid);
        }
        Ok(Action::requeue(next_pass(delay, until_wake)))
    }

    /// The promoted child changed: its metric, and one Event per new child (routine updates
    /// show in status and metrics only: an Event per update would double the writes of a mass
    /// update).
    async fn changed(&self, ctx: &Ctx, trace: &Trace) {
        let phase = if trace.created { "create" } else { "update" };
        ctx.metrics.child_change(
            R::KIND.controller(),
            phase,
            self.started.elapsed().as_secs_f64(),
        );
        if trace.created {
            ctx.events
                .publish_once(
                    R::KIND.event_source(),
                    &self.obj.object_ref(&()),
                    EventType::Normal,
                    R::KIND.success_event(),
                    "Reconciliation successful: child created".into(),
                )
                .await;
        }
    }
}

/// When to look again: after `otherwise` (the periodic re-check, or what is left of a status
/// hold), or at the engine's deadline if that comes first. A held status must not put off a
/// deadline (a recycling expiry, a failure wait): a hold lasts up to ten minutes while the
/// namespace's Numaflow controller works through a backlog.
fn next_pass(otherwise: Duration, wake: Option<Duration>) -> Duration {
    wake.map_or(otherwise, |w| w.min(otherwise))
}

/// Whether a status change is only an observation that may wait for the child to settle: no
/// strategy starts, runs or ends in it (those are recorded before anything acts on them).
fn holdable<R: Rollout>(before: &R::Status, after: &R::Status) -> bool {
    let idle = |s: &R::Status| s.common().upgrade_in_progress == Default::default();
    // The name count and pod history are observations too (a new name is checked against a
    // live list before use; the history only sizes later drains).
    let durable = |s: &R::Status| numaplane_core::progressive::Record {
        name_count: None,
        historical_pod_count: None,
        ..R::read_record(s)
    };
    idle(before) && idle(after) && durable(before) == durable(after)
}

/// The one-hot health series of a rollout, and its count in its namespace.
fn record_health<R: Rollout>(ctx: &Ctx, obj: &R, st: &numaplane_api::common::Status) {
    let ns = obj.ns();
    let name = obj.name_any();
    let is_false = |t: &str| {
        numaplane_core::conditions::get_condition(&st.conditions, t)
            .is_some_and(|c| c.status == "False")
            .to_string()
    };
    let labels = vec![
        ("namespace", ns.to_string()),
        (R::KIND.metric_label(), name.clone()),
        ("phase", st.phase.as_str().to_string()),
        (
            "promotedChildFailure",
            is_false(keys::condition::CHILD_RESOURCES_HEALTHY),
        ),
        (
            "progressiveFailure",
            is_false(keys::condition::PROGRESSIVE_UPGRADE_SUCCEEDED),
        ),
    ];
    ctx.metrics
        .set_health(Subject::Rollout(R::KIND), ns, &name, labels);
    ctx.metrics.count(R::KIND, ns, &name, true);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_wakes_the_rollout_before_a_hold_or_the_recheck_ends() {
        let s = Duration::from_secs;
        // A deadline in 3 s while the rollout's status is held for 5 minutes more.
        assert_eq!(next_pass(s(300), Some(s(3))), s(3));
        assert_eq!(next_pass(IN_PROGRESS_RECHECK, Some(s(3))), s(3));
        // No deadline, or a later one: the hold or re-check decides.
        assert_eq!(next_pass(s(300), None), s(300));
        assert_eq!(
            next_pass(IN_PROGRESS_RECHECK, Some(s(60))),
            IN_PROGRESS_RECHECK
        );
    }
}
