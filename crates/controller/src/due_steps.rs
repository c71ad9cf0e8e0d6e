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
//! under way to end first. The runner's own wake for the same moment stays, 100 ms later: it is
//! the fallback if the lane is full or not running, and after the lane's pass it finds the
//! verdict already taken (and asks for the next wake, which a lane pass's answer cannot).

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
/// How much later than the lane a worker's own wake for the same moment comes: it is the
/// fallback (a lane full or not running), and re-arms the wake the lane's pass asked for.
pub const WORKER_AFTER_LANE: Duration = Duration::from_millis(100);
/// How long a runner pass steps aside while its rollout's due step runs in the lane.
pub const STEP_ASIDE: Duration = Duration::from_millis(100);
/// Passes the lane runs at once. A due pass is a few API calls, each answered in a second or
/// more while the API server works through a mass upgrade, and a hundred trials that came up
/// together fall due together: at N=10,000, 8 at once kept a quarter of the MonoVertex steps
/// waiting 1 to 10 s for their turn. Its first write goes out when it starts, whatever the
/// API server then takes to answer.
pub const LANE_PASSES: usize = 64;
/// How often the lane looks whether a runner pass of its rollout has ended.
const RUNNER_POLL: Duration = Duration::from_millis(10);

/// The rollout a step belongs to: its controller (`Kind::controller`), where and which.
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
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// UIDs of the rollouts whose pass is under way, in either path.
    in_pass: HashSet<String>,
    /// By rollout UID: when its scheduled step falls due, until a pass takes it.
    due: HashMap<String, Instant>,
    /// UIDs whose next pass the lane is starting.
    lane: HashSet<String>,
}

/// A rollout's pass under way; ends when dropped.
pub struct InPass<'a> {
    steps: &'a DueSteps,
    uid: String,
    /// How long after its moment this pass took its rollout's due step, if one was due.
    pub took_due_step: Option<Duration>,
    /// Started by the lane (else by a worker).
    pub by_lane: bool,
}

impl Drop for InPass<'_> {
    fn drop(&mut self) {
        self.steps.state().in_pass.remove(&self.uid);
    }
}

impl DueSteps {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The step of `of` falls due at `at` (`None`: its pass scheduled none). Without a lane for
    /// its controller (a controller not started here) the runner's own wake takes it.
    pub fn schedule(&self, of: StepOf, at: Option<Instant>) {
        {
            let mut st = self.state();
            match at {
                Some(at) => st.due.insert(of.uid.clone(), at),
                None => st.due.remove(&of.uid),
            };
        }
        let lanes = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(lane) = lanes.get(of.controller) {
            let _ = lane.send(Scheduled { of, at });
        }
    }

    /// A pass of `uid` begins at `now`, unless one is under way (then `None`); it takes its
    /// rollout's step if that is due (whichever path it came by).
    pub fn begin(&self, uid: &str, now: Instant) -> Option<InPass<'_>> {
        let mut st = self.state();
        if !st.in_pass.insert(uid.to_string()) {
            return None;
        }
        let by_lane = st.lane.remove(uid);
        let took_due_step = match st.due.get(uid) {
            Some(at) if *at <= now => {
                let late = now.saturating_duration_since(*at);
                st.due.remove(uid);
                Some(late)
            }
            _ => None,
        };
        Some(InPass {
            steps: self,
            uid: uid.to_string(),
            took_due_step,
            by_lane,
        })
    }

    fn busy(&self, uid: &str) -> bool {
        self.state().in_pass.contains(uid)
    }

    /// Whether the step of `uid` due at `at` is still to be taken.
    fn still_due(&self, uid: &str, at: Instant) -> bool {
        self.state().due.get(uid) == Some(&at)
    }

    /// `uid` is gone.
    pub fn forget(&self, uid: &str) {
        self.state().due.remove(uid);
    }

    /// Starts the lane of `controller`: each step is handed to `run` at its moment (a later
    /// schedule of the same rollout replaces it), at most [`LANE_PASSES`] at once, each once no
    /// runner pass of its rollout is under way, and only if none has taken the step meanwhile.
    /// `run` is expected to begin its pass with [`DueSteps::begin`].
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
                    // Taken by a runner pass meanwhile: nothing left for the lane.
                    if steps.still_due(&due.uid, due.at) {
                        let uid = due.uid.clone();
                        steps.state().lane.insert(uid.clone());
                        run(due).await;
                        steps.state().lane.remove(&uid);
                    }
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

    /// What a lane pass reported: the rollout, when it began, and whether it took the step.
    type Ran = (String, Instant, Option<Duration>);

    /// A lane on controller `c` whose passes begin as a rollout's pass does and report on the
    /// returned channel.
    fn lane_on(
        tasks: &mut JoinSet<()>,
        cancel: &CancellationToken,
    ) -> (Arc<DueSteps>, mpsc::UnboundedReceiver<Ran>) {
        let steps = Arc::new(DueSteps::default());
        let (tx, rx) = mpsc::unbounded_channel();
        let inner = steps.clone();
        steps.spawn_lane(tasks, cancel, "c", move |d: Due| {
            let (tx, steps) = (tx.clone(), inner.clone());
            async move {
                let now = Instant::now();
                let pass = steps
                    .begin(&d.uid, now)
                    .expect("the lane waited for its turn");
                assert!(pass.by_lane);
                let _ = tx.send((d.name, now, pass.took_due_step));
            }
        });
        (steps, rx)
    }

    #[test]
    fn a_pass_takes_its_rollout_s_step_once_it_is_due_and_only_once() {
        let steps = DueSteps::default();
        let t0 = Instant::now();
        steps.schedule(of("a"), Some(t0 + MS(500)));
        let early = steps.begin("uid-a", t0 + MS(100)).expect("free");
        assert_eq!(early.took_due_step, None);
        drop(early);
        let on_time = steps.begin("uid-a", t0 + MS(700)).expect("free");
        assert_eq!(on_time.took_due_step, Some(MS(200)));
        assert!(!on_time.by_lane);
        drop(on_time);
        assert_eq!(
            steps
                .begin("uid-a", t0 + MS(800))
                .and_then(|p| p.took_due_step),
            None
        );
        // A pass that scheduled nothing more clears it; a forgotten rollout has none.
        steps.schedule(of("b"), Some(t0));
        steps.schedule(of("b"), None);
        steps.schedule(of("c"), Some(t0));
        steps.forget("uid-c");
        for uid in ["uid-b", "uid-c"] {
            assert_eq!(
                steps.begin(uid, t0 + MS(1)).and_then(|p| p.took_due_step),
                None
            );
        }
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
        let (name, at, took) = ran.recv().await.expect("a ran");
        assert_eq!(name, "a");
        assert!(at >= t0 + MS(500) && at < t0 + LATE, "{:?}", at - t0);
        assert!(took.is_some_and(|d| d < LATE), "a's pass took its step");
        let (name, at, _) = ran.recv().await.expect("b ran");
        assert_eq!(name, "b");
        assert!(
            at >= t0 + MS(900) && at < t0 + MS(400) + LATE,
            "{:?}",
            at - t0
        );
        tokio::time::sleep(MS(300)).await;
        assert!(ran.try_recv().is_err(), "c's step was cancelled");
        // Steps of a controller without a lane are left to its runner.
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
    async fn the_lane_waits_for_a_runner_pass_of_the_same_rollout_and_skips_a_step_it_took() {
        let (mut tasks, cancel) = (JoinSet::new(), CancellationToken::new());
        let (steps, mut ran) = lane_on(&mut tasks, &cancel);
        let t0 = Instant::now();
        let runner = steps.begin("uid-a", t0).expect("nothing under way");
        // The same rollout cannot start twice, another can.
        assert!(steps.begin("uid-a", t0).is_none());
        assert!(steps.begin("uid-b", t0).is_some());
        steps.schedule(of("a"), Some(t0 + MS(100)));
        tokio::time::sleep(MS(400)).await;
        assert!(ran.try_recv().is_err(), "ran beside the runner's pass");
        drop(runner);
        let (name, at, took) = ran.recv().await.expect("a ran");
        assert_eq!(name, "a");
        assert!(at >= t0 + MS(400) && at < t0 + LATE, "{:?}", at - t0);
        assert!(took.is_some(), "the lane's pass took the step");
        // A runner pass that begins after the moment takes the step: the lane leaves it.
        let t1 = Instant::now();
        let blocker = steps.begin("uid-a", t1).expect("free");
        steps.schedule(of("a"), Some(t1 + MS(100)));
        tokio::time::sleep(MS(300)).await;
        drop(blocker);
        let runner = steps.begin("uid-a", Instant::now()).expect("free");
        assert!(runner.took_due_step.is_some(), "the runner's pass took it");
        assert!(!runner.by_lane);
        tokio::time::sleep(MS(100)).await;
        drop(runner);
        tokio::time::sleep(MS(300)).await;
        assert!(ran.try_recv().is_err(), "the lane ran a step already taken");
        cancel.cancel();
    }
}
