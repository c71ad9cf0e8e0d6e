//! Rollout passes take workers first come, first served.
//!
//! kube-runtime's runner, once all of its workers are busy, parks every rollout that falls due in
//! a hash set and hands a freed worker to the first rollout in that set's iteration order. Under a
//! backlog that never empties (at N=10,000, 2,000 trials sampled every second while the API server
//! answered writes in tenths of a second) the same rollouts kept being picked: in one run 7,135
//! passes came more than 20 s after they were due, and three promotions came three to five
//! minutes late. So each rollout controller's runner starts a pass as soon as it is due (up to
//! [`STARTED_PER_WORKER`] per worker; it still runs one pass per rollout at a time) and the pass
//! waits here for one of `workers` permits of a fair semaphore, in the order the passes became
//! due. A pass whose own engine step is due (a verdict, `due_steps.rs`) waits in a lane of its
//! own, so a verdict never queues behind routine passes.

use std::time::Instant;
use tokio::sync::{Semaphore, SemaphorePermit};

/// Passes a rollout controller's runner starts at once, per worker: 1,024 with 16 workers, more
/// than a thousand trials sampled every second need, so that they are served in turn; beyond
/// that the runner's own order applies again. Unbounded, the 11,001 passes of a cold start at
/// N=10,000 all started at once and the controller kept some 70 MiB more for the rest of the run.
pub const STARTED_PER_WORKER: u16 = 64;

/// The workers of one rollout controller.
pub struct PassQueue {
    routine: Semaphore,
    due: Semaphore,
}

impl PassQueue {
    pub fn new(workers: u16) -> Self {
        let n = usize::from(workers.max(1));
        Self {
            routine: Semaphore::new(n),
            due: Semaphore::new(n),
        }
    }

    /// Waits for a worker, in turn (tokio's semaphore is fair), and says whether it is one of the
    /// lane of due passes: when `due`, or once `due_at` comes while the pass still waits (a
    /// routine pass of a rollout whose verdict falls due meanwhile, which would otherwise hold
    /// the verdict's pass back for as long as the routine queue is). The worker is free again
    /// when the permit is dropped.
    pub async fn worker(
        &self,
        due: bool,
        due_at: Option<Instant>,
    ) -> (Option<SemaphorePermit<'_>>, bool) {
        // Never closed, so never an error.
        if due {
            return (self.due.acquire().await.ok(), true);
        }
        let Some(at) = due_at else {
            return (self.routine.acquire().await.ok(), false);
        };
        tokio::select! {
            biased;
            p = self.routine.acquire() => (p.ok(), false),
            p = async {
                tokio::time::sleep_until(at.into()).await;
                self.due.acquire().await
            } => (p.ok(), true),
        }
    }
}

/// One [`PassQueue`] per rollout controller.
pub struct PassQueues {
    pub pipeline_rollouts: PassQueue,
    pub monovertex_rollouts: PassQueue,
    pub isb_service_rollouts: PassQueue,
}

impl PassQueues {
    pub fn new(workers: u16) -> Self {
        Self {
            pipeline_rollouts: PassQueue::new(workers),
            monovertex_rollouts: PassQueue::new(workers),
            isb_service_rollouts: PassQueue::new(workers),
        }
    }

    /// The queue of the controller named `controller` (`Rollout::CONTROLLER`).
    pub fn of(&self, controller: &str) -> &PassQueue {
        match controller {
            "pipeline-rollout-controller" => &self.pipeline_rollouts,
            "monovertex-rollout-controller" => &self.monovertex_rollouts,
            _ => &self.isb_service_rollouts,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    #[tokio::test]
    async fn passes_get_workers_in_the_order_they_asked() {
        let q = Arc::new(PassQueue::new(1));
        let order = Arc::new(Mutex::new(Vec::new()));
        let held = q.worker(false, None).await;
        let mut waiting = Vec::new();
        for i in 0..20 {
            let (q, order) = (q.clone(), order.clone());
            waiting.push(tokio::spawn(async move {
                let _w = q.worker(false, None).await;
                order.lock().unwrap_or_else(|e| e.into_inner()).push(i);
            }));
            // Each asks after the one before.
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        drop(held);
        for w in waiting {
            w.await.expect("a pass");
        }
        let got = order.lock().unwrap_or_else(|e| e.into_inner()).clone();
        assert_eq!(got, (0..20).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn a_due_pass_does_not_wait_behind_routine_ones() {
        let q = PassQueue::new(2);
        let _busy = (q.worker(false, None).await, q.worker(false, None).await);
        let due = tokio::time::timeout(Duration::from_secs(1), q.worker(true, None)).await;
        assert!(
            matches!(due, Ok((Some(_), true))),
            "a due pass waited for a routine worker"
        );
        let routine = tokio::time::timeout(Duration::from_millis(50), q.worker(false, None)).await;
        assert!(routine.is_err(), "a third routine pass got a worker of two");
        // A routine pass still waiting when its rollout's verdict falls due takes the due lane.
        let at = Instant::now() + Duration::from_millis(50);
        let switched =
            tokio::time::timeout(Duration::from_secs(1), q.worker(false, Some(at))).await;
        assert!(
            matches!(switched, Ok((Some(_), true))),
            "a pass whose verdict fell due kept waiting in the routine queue"
        );
        assert!(Instant::now() >= at);
    }

    #[test]
    fn each_rollout_controller_has_its_own_queue() {
        let qs = PassQueues::new(1);
        assert!(std::ptr::eq(
            qs.of("pipeline-rollout-controller"),
            &qs.pipeline_rollouts
        ));
        assert!(std::ptr::eq(
            qs.of("monovertex-rollout-controller"),
            &qs.monovertex_rollouts
        ));
        assert!(std::ptr::eq(
            qs.of("isbsvc-rollout-controller"),
            &qs.isb_service_rollouts
        ));
    }
}
