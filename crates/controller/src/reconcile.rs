//! What every controller does around one pass of one object: nothing on a standby, a span, the
//! freshest status this operator wrote, the reconcile metric, and a failed pass's backoff. A
//! failure is retried from here, with the object's own backoff, so kube-runtime's error policy
//! never sees one.

use crate::context::Ctx;
use crate::error::Error;
use crate::status;
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use numaplane_api::Reconciled;
use serde::de::DeserializeOwned;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{Instrument, info_span, warn};

/// What a pass came to.
pub enum Ran {
    /// The pass ran: its result is measured and a failure backed off.
    Pass(Result<Action, Error>),
    /// The pass stood aside (another pass of the object is under way): nothing is measured.
    Aside(Action),
}

/// Runs `pass` on the freshest `obj` as [`Reconciled::SUBJECT`]'s controller; `pass` is handed
/// the object and when the pass started.
pub async fn around<O, F, Fut>(ctx: &Ctx, obj: Arc<O>, pass: F) -> Result<Action, Error>
where
    O: Resource + Reconciled + DeserializeOwned,
    F: FnOnce(Arc<O>, Instant) -> Fut,
    Fut: Future<Output = Ran>,
{
    let subject = O::SUBJECT;
    let (ns, name) = (obj.namespace().unwrap_or_default(), obj.name_any());
    let span =
        info_span!("reconcile", controller = subject.controller(), namespace = %ns, name = %name);
    async move {
        // A standby keeps its caches warm but leaves the objects alone; it reconciles
        // everything the moment it becomes leader.
        if !ctx.is_leader() {
            return Ok(Action::await_change());
        }
        let started = Instant::now();
        let obj = status::fresher(ctx, obj);
        let res = match pass(obj, started).await {
            Ran::Pass(res) => res,
            Ran::Aside(action) => return Ok(action),
        };
        let secs = started.elapsed().as_secs_f64();
        ctx.metrics
            .reconciled(subject, secs, res.as_ref().err().map(Error::reason));
        Ok(next_action(
            ctx,
            &format!("{}/{ns}/{name}", subject.kind()),
            res,
        ))
    }
    .instrument(span)
    .await
}

/// The action after a pass: its own, or a retry with the object's backoff. A problem the user
/// must fix is retried slowly: their edit wakes the object anyway.
fn next_action(ctx: &Ctx, key: &str, res: Result<Action, Error>) -> Action {
    match res {
        Ok(action) => {
            ctx.clear_failures(key);
            action
        }
        Err(e) => {
            let delay = ctx.backoff(key);
            warn!(error = %e, reason = e.reason(), retry_in = ?delay, "reconcile failed");
            if e.is_transient() {
                Action::requeue(delay)
            } else {
                Action::requeue(delay.max(Duration::from_secs(60)))
            }
        }
    }
}

/// kube-runtime's error policy, for every controller: errors do not escape [`around`], so this
/// only logs what would be a bug.
pub fn error_policy<O, C>(_obj: Arc<O>, err: &Error, _ctx: Arc<C>) -> Action {
    warn!(error = %err, "unexpected reconcile error");
    Action::requeue(Duration::from_secs(5))
}
