//! Steps that fall due are taken at their moment, beside the workers. A rollout whose engine
//! scheduled a step (a progressive verdict at the end of its healthy period or assessment
//! window, or the finish of its trial's AnalysisRun) gets its pass from a lane of its own at
//! that moment, instead of waiting for one of kube-runtime's workers: once every worker is busy,
//! kube-runtime parks what falls due in a hash set and hands a freed worker to whichever comes
//! first in its iteration order, so under the backlog of a mass upgrade (at N=10,000, 2,000
//! trials created and reported at once) a verdict waited a random while for a worker, seconds
//! at the tail. Making routine passes step aside for due ones helped at N=1000 and not beyond.
//!
//! A pass runs once per rollout at a time in either path: a runner pass that finds the lane's
//! pass of its rollout under way steps aside for a moment, and the lane waits for a runner pass
//! under way to end first. The runner's own wake for the same moment stays: it is the fallback
//! if the lane is not running, and after the lane's pass it finds the verdict already taken.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tokio_util::time::{DelayQueue, delay_queue};

/// Added to a wake at an engine deadline, in the lane and the runner alike. A timer never fires
/// early; the margin covers the wall clock being slewed meanwhile.
pub const WAKE_MARGIN: Duration = Duration::from_millis(20);
/// How long a runner pass steps aside while its rollout's due step runs in the lane.
pub const STEP_ASIDE: Duration = Duration::from_millis(100);
/// Passes the lane runs at once (verdicts fall due a few a second even in a mass upgrade;
/// each is a handful of API calls).
pub const LANE_PASSES: usize = 8;
/// How often the lane looks whether a runner pass of its rollout has ended.
const RUNNER_POLL: Duration = Duration::from_millis(10);

/// The rollout a step belongs to: its controller (`Rollout::CONTROLLER`), where and which.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StepOf {
    pub controller: &'static str,
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// A step to take at `at`, or (`None`) none any more.
#[derive(Debug)]
pub struct Scheduled {
    pub of: StepOf,
    pub at: Option<Instant>,
}

/// A step fallen due, as the lane hands it to its controller.
#[derive(Clone, Debug)]
pub struct Due {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub at: Instant,
}

#[derive(Default)]
pub struct DueSteps {
    /// By controller: where its steps are sent (registered when its lane starts).
    lanes: Mutex<HashMap<&'static str, mpsc::UnboundedSender<Scheduled>>>,
    /// UIDs of the rollouts whose pass is under way, in either path.
    in_pass: Mutex<HashSet<String>>,
}

/// A rollout's pass under way; ends when dropped.
pub struct InPass<'a> {
    steps: &'a DueSteps,
    uid: String,
}

impl Drop for InPass<'_> {
    fn drop(&mut self) {
        self.steps.passes().remove(&self.uid);
    }
}

impl DueSteps {
    fn passes(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.in_pass.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The step of `of` falls due at `at` (`None`: its pass scheduled none). Without a lane for
    /// its controller (a controller not started here) the runner's own wake takes it.
    pub fn schedule(&self, of: StepOf, at: Option<Instant>) {
        let lanes = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(lane) = lanes.get(of.controller) {
            let _ = lane.send(Scheduled { of, at });
        }
    }

    /// A pass of `uid` begins, unless one is under way (then `None`).
    pub fn begin(&self, uid: &str) -> Option<InPass<'_>> {
        self.passes().insert(uid.to_string()).then(|| InPass {
            steps: self,
            uid: uid.to_string(),
        })
    }

    fn busy(&self, uid: &str) -> bool {
        self.passes().contains(uid)
    }

    /// Starts the lane of `controller`: each step is handed to `run` at its moment (a later
    /// schedule of the same rollout replaces it), at most [`LANE_PASSES`] at once, each once no
    /// runner pass of its rollout is under way.
    pub fn spawn_lane<F, Fut>(
        self: &Arc<Self>,
        tasks: &mut JoinSet<()>,
        cancel: &CancellationToken,
        controller: &'static str,
        run: F,
    ) where
        F: Fn(Due) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let (tx, rx) = mpsc::unbounded_channel();
        self.lanes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(controller, tx);
        let (steps, token) = (self.clone(), cancel.clone());
        tasks.spawn(async move {
            tokio::select! {
                _ = token.cancelled() => {}
                _ = lane(steps, rx, Arc::new(run)) => {}
            }
        });
    }
}

/// The lane's loop: a timer per rollout with a step scheduled.
async fn lane<F, Fut>(steps: Arc<DueSteps>, mut rx: mpsc::UnboundedReceiver<Scheduled>, run: Arc<F>)
where
    F: Fn(Due) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut timers: DelayQueue<(String, String)> = DelayQueue::new();
    let mut scheduled: HashMap<(String, String), (delay_queue::Key, Due)> = HashMap::new();
    let permits = Arc::new(Semaphore::new(LANE_PASSES));
    let mut passes = JoinSet::new();
    loop {
        tokio::select! {
            next = rx.recv() => {
                let Some(Scheduled { of, at }) = next else { return };
                let key = (of.namespace.clone(), of.name.clone());
                match (at, scheduled.remove(&key)) {
                    (None, Some((k, _))) => { timers.remove(&k); }
                    (None, None) => {}
                    (Some(at), old) => {
                        let due = Due { namespace: of.namespace, name: of.name, uid: of.uid, at };
                        let k = match old {
                            Some((k, _)) => { timers.reset_at(&k, at.into()); k }
                            None => timers.insert_at(key.clone(), at.into()),
                        };
                        scheduled.insert(key, (k, due));
                    }
                }
            }
            Some(expired) = futures::StreamExt::next(&mut timers) => {
                let Some((_, due)) = scheduled.remove(expired.get_ref()) else { continue };
                let (steps, run, permits) = (steps.clone(), run.clone(), permits.clone());
                passes.spawn(async move {
                    let Ok(_permit) = permits.acquire().await else { return };
                    // A runner pass under way ends first (it may be taking this very step).
                    while steps.busy(&due.uid) {
                        tokio::time::sleep(RUNNER_POLL).await;
                    }
                    run(due).await;
                });
            }
            // Finished passes are reaped as they end.
            Some(_) = passes.join_next(), if !passes.is_empty() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;
    /// Generous for a loaded machine: the point is the order and never early.
    const LATE: Duration = Duration::from_secs(2);

    fn of(name: &str) -> StepOf {
        StepOf {
            controller: "c",
            namespace: "ns".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
        }
    }

    /// A lane on controller `c` whose passes report `(name, when)` on the returned channel.
    fn lane_on(
        tasks: &mut JoinSet<()>,
        cancel: &CancellationToken,
    ) -> (Arc<DueSteps>, mpsc::UnboundedReceiver<(String, Instant)>) {
        let steps = Arc::new(DueSteps::default());
        let (tx, rx) = mpsc::unbounded_channel();
        steps.spawn_lane(tasks, cancel, "c", move |d: Due| {
            let tx = tx.clone();
            async move {
                let _ = tx.send((d.name, Instant::now()));
            }
        });
        (steps, rx)
    }

    #[tokio::test]
    async fn a_step_runs_at_its_moment_and_a_later_schedule_replaces_it() {
        let (mut tasks, cancel) = (JoinSet::new(), CancellationToken::new());
        let (steps, mut ran) = lane_on(&mut tasks, &cancel);
        let t0 = Instant::now();
        steps.schedule(of("a"), Some(t0 + MS(500)));
        steps.schedule(of("b"), Some(t0 + MS(300)));
        // b's pass moved its step on; c's was taken elsewhere.
        steps.schedule(of("b"), Some(t0 + MS(900)));
        steps.schedule(of("c"), Some(t0 + MS(200)));
        steps.schedule(of("c"), None);
        let (name, at) = ran.recv().await.expect("a ran");
        assert_eq!(name, "a");
        assert!(at >= t0 + MS(500) && at < t0 + LATE, "{:?}", at - t0);
        let (name, at) = ran.recv().await.expect("b ran");
        assert_eq!(name, "b");
        assert!(
            at >= t0 + MS(900) && at < t0 + MS(400) + LATE,
            "{:?}",
            at - t0
        );
        tokio::time::sleep(MS(300)).await;
        assert!(ran.try_recv().is_err(), "c's step was cancelled");
        // Steps of a controller without a lane are dropped (its runner takes them).
        steps.schedule(
            StepOf {
                controller: "other",
                ..of("d")
            },
            Some(Instant::now()),
        );
        cancel.cancel();
    }

    #[tokio::test]
    async fn the_lane_waits_for_a_runner_pass_of_the_same_rollout_and_a_runner_pass_for_it() {
        let (mut tasks, cancel) = (JoinSet::new(), CancellationToken::new());
        let (steps, mut ran) = lane_on(&mut tasks, &cancel);
        let t0 = Instant::now();
        let runner = steps.begin("uid-a").expect("nothing under way");
        // The same rollout cannot start twice, another can.
        assert!(steps.begin("uid-a").is_none());
        assert!(steps.begin("uid-b").is_some());
        steps.schedule(of("a"), Some(t0 + MS(100)));
        tokio::time::sleep(MS(400)).await;
        assert!(ran.try_recv().is_err(), "ran beside the runner's pass");
        drop(runner);
        let (name, at) = ran.recv().await.expect("a ran");
        assert_eq!(name, "a");
        assert!(at >= t0 + MS(400) && at < t0 + LATE, "{:?}", at - t0);
        assert!(steps.begin("uid-a").is_some(), "ended with the pass");
        cancel.cancel();
    }
}
