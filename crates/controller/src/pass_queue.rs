//! Rollout passes take workers first come, first served.
//!
//! kube-runtime's runner, once all of its workers are busy, parks every rollout that falls due in
//! a hash set and hands a freed worker to the first rollout in that set's iteration order. Under a
//! backlog that never empties (at N=10,000, 2,000 trials sampled every second while the API server
//! answered writes in tenths of a second) the same rollouts kept being picked: in one run 7,135
//! passes came more than 20 s after they were due, and three promotions came three to five
//! minutes late. So each rollout controller's runner starts every pass as soon as it is due (its
//! own concurrency unbounded; it still runs one pass per rollout at a time) and the pass waits
//! here for one of `workers` permits of a fair semaphore, in the order the passes became due. A
//! pass whose own engine step is due (a verdict, `due_steps.rs`) waits in a lane of its own, so a
//! verdict never queues behind routine passes.

use tokio::sync::{Semaphore, SemaphorePermit};

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

    /// Waits for a worker, in turn (tokio's semaphore is fair); `due`: in the lane of passes
    /// whose step is due. The worker is free again when the permit is dropped.
    pub async fn worker(&self, due: bool) -> Option<SemaphorePermit<'_>> {
        let lane = if due { &self.due } else { &self.routine };
        // Never closed, so never an error.
        lane.acquire().await.ok()
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
        let held = q.worker(false).await;
        let mut waiting = Vec::new();
        for i in 0..20 {
            let (q, order) = (q.clone(), order.clone());
            waiting.push(tokio::spawn(async move {
                let _w = q.worker(false).await;
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
        let _busy = (q.worker(false).await, q.worker(false).await);
        let due = tokio::time::timeout(Duration::from_secs(1), q.worker(true)).await;
        assert!(
            matches!(due, Ok(Some(_))),
            "a due pass waited for a routine worker"
        );
        let routine = tokio::time::timeout(Duration::from_millis(50), q.worker(false)).await;
        assert!(routine.is_err(), "a third routine pass got a worker of two");
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
