use super::*;

const NC: &str = "numaflow-controller";

fn at(s: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + s).expect("timestamp")
}

fn child<'a>(name: &'a str, instance: &'a str, version: &'a str) -> ControllerChild<'a> {
    ControllerChild {
        name,
        instance_id: instance,
        version,
        deleting: false,
        available: Ok(()),
    }
}

fn workload<'a>(kind: Kind, rollout: &'a str) -> Workload<'a> {
    Workload {
        kind,
        rollout,
        isb_rollout: None,
        trial: None,
        promoted_instance: Some(""),
    }
}

fn pipeline<'a>(rollout: &'a str, isb: &'a str) -> Workload<'a> {
    Workload {
        isb_rollout: Some(isb),
        ..workload(Kind::Pipeline, rollout)
    }
}

struct World<'a> {
    now: i64,
    desired: &'a str,
    max_parallel: usize,
    children: Vec<ControllerChild<'a>>,
    workloads: Vec<Workload<'a>>,
    in_use: BTreeSet<String>,
    trials: bool,
}

impl<'a> World<'a> {
    fn new(desired: &'a str) -> Self {
        World {
            now: 0,
            desired,
            max_parallel: 5,
            children: vec![child(NC, "", "1.7.5")],
            workloads: vec![
                workload(Kind::IsbService, "isb"),
                pipeline("p1", "isb"),
                pipeline("p2", "isb"),
                workload(Kind::MonoVertex, "mv"),
            ],
            in_use: BTreeSet::from([String::new()]),
            trials: true,
        }
    }

    fn plan(&self, recorded: Option<&ControllerProgressiveStatus>) -> Plan {
        let schedule = AssessmentSchedule {
            delay: Duration::from_secs(5),
            end: Duration::from_secs(300),
            period: Duration::from_secs(0),
            interval: Duration::from_secs(10),
        };
        plan(&Input {
            now: at(self.now),
            rollout: NC,
            base_instance: "",
            desired_version: self.desired,
            schedule,
            max_parallel: self.max_parallel,
            trials: self.trials,
            recorded,
            children: &self.children,
            workloads: &self.workloads,
            instances_in_use: &self.in_use,
        })
        .expect("the rollout has a controller")
    }
}

fn upgrading(p: &Plan) -> &UpgradingControllerStatus {
    p.status
        .upgrading_controller_status
        .as_ref()
        .expect("a trial is recorded")
}

fn states(p: &Plan) -> Vec<(String, WorkloadTrialState)> {
    upgrading(p)
        .workloads
        .iter()
        .map(|w| (w.rollout.clone(), w.state))
        .collect()
}

/// Starts a trial of 1.8.1 and runs the pass that admits the first groups.
fn started(w: &World<'_>) -> Plan {
    let start = w.plan(None);
    w.plan(Some(&start.status))
}

#[test]
fn no_version_change_is_quiet_and_names_the_first_child_promoted() {
    let w = World::new("1.7.5");
    let p = w.plan(None);
    assert_eq!(p.actions, vec![]);
    assert_eq!(p.waiting_for, None);
    assert_eq!(p.recheck, None);
    let promoted = p.status.promoted_controller_status.expect("promoted");
    assert_eq!(
        (promoted.name.as_str(), promoted.instance_id.as_str()),
        (NC, "")
    );
}

#[test]
fn a_rollout_without_a_controller_takes_the_plain_create_path() {
    let mut w = World::new("1.8.1");
    w.children.clear();
    let schedule = DEFAULT_SCHEDULE;
    let none = plan(&Input {
        now: at(0),
        rollout: NC,
        base_instance: "",
        desired_version: "1.8.1",
        schedule,
        max_parallel: 1,
        trials: true,
        recorded: None,
        children: &w.children,
        workloads: &w.workloads,
        instances_in_use: &w.in_use,
    });
    assert_eq!(none, None);
}

#[test]
fn a_version_change_records_then_creates_a_trial_on_its_own_instance() {
    let w = World::new("1.8.1");
    let p = w.plan(None);
    let u = upgrading(&p);
    assert_eq!(u.controller.name, "numaflow-controller-1");
    assert_eq!(u.controller.instance_id, "1");
    assert_eq!(u.controller.version, "1.8.1");
    assert_eq!(u.assessment_result, Some(AssessmentResult::Unknown));
    assert_eq!(p.actions, vec![Action::Create(u.controller.clone())]);
    assert!(
        u.workloads
            .iter()
            .all(|w| w.state == WorkloadTrialState::Waiting)
    );
    assert_eq!(u.workloads.len(), 4);
    assert_eq!(u.workloads[0].kind, "ISBServiceRollout");
}

#[test]
fn trial_instances_extend_the_base_instance() {
    assert_eq!(trial_instance_id("", 3), "3");
    assert_eq!(trial_instance_id("blue", 3), "blue-3");
    assert_eq!(trial_instance_id("  ", 1), "1");
}

#[test]
fn a_lost_create_is_redone_under_the_recorded_name() {
    let w = World::new("1.8.1");
    let start = w.plan(None);
    // The controller stopped after recording: the trial child does not exist.
    let again = w.plan(Some(&start.status));
    let name = &upgrading(&start).controller.name;
    assert_eq!(&upgrading(&again).controller.name, name);
    assert!(
        again
            .actions
            .contains(&Action::Create(upgrading(&start).controller.clone()))
    );
}

#[test]
fn a_pipeline_moves_with_its_isb_service_and_parallelism_is_bounded() {
    let mut w = World::new("1.8.1");
    w.max_parallel = 1;
    let p = started(&w);
    assert_eq!(
        states(&p),
        vec![
            ("isb".to_string(), WorkloadTrialState::Admitted),
            ("p1".to_string(), WorkloadTrialState::Admitted),
            ("p2".to_string(), WorkloadTrialState::Admitted),
            ("mv".to_string(), WorkloadTrialState::Waiting),
        ]
    );
    // The MonoVertex is admitted once the ISB group's trials are decided.
    w.children
        .push(child("numaflow-controller-1", "1", "1.8.1"));
    w.now = 20;
    for wl in w.workloads.iter_mut().take(3) {
        wl.trial = Some(("trial", AssessmentResult::Success));
    }
    let next = w.plan(Some(&p.status));
    assert_eq!(
        states(&next).last(),
        Some(&("mv".to_string(), WorkloadTrialState::Admitted))
    );
    assert_eq!(
        upgrading(&next).assessment_result,
        Some(AssessmentResult::Unknown)
    );
}

#[test]
fn workloads_render_on_the_trial_instance_and_are_held_until_the_verdict() {
    let mut w = World::new("1.8.1");
    w.max_parallel = 1;
    let p = started(&w);
    let isb = target(Some(&p.status), Kind::IsbService, "isb");
    assert_eq!(
        isb,
        Target {
            instance: Some("1".into()),
            hold: true
        }
    );
    let mv = target(Some(&p.status), Kind::MonoVertex, "mv");
    assert_eq!(
        mv,
        Target {
            instance: Some(String::new()),
            hold: false
        }
    );
    assert_eq!(
        target(None, Kind::MonoVertex, "mv"),
        Target {
            instance: None,
            hold: false
        }
    );
}

/// Every workload's trial succeeds on a healthy trial controller.
fn succeeded(w: &mut World<'_>) -> Plan {
    let p = started(w);
    w.children
        .push(child("numaflow-controller-1", "1", "1.8.1"));
    w.now = 30;
    for wl in &mut w.workloads {
        wl.trial = Some(("trial", AssessmentResult::Success));
    }
    w.plan(Some(&p.status))
}

#[test]
fn success_when_the_controller_is_available_and_every_trial_succeeded() {
    let mut w = World::new("1.8.1");
    let p = succeeded(&mut w);
    assert_eq!(p.verdict, Some(AssessmentResult::Success));
    assert_eq!(
        upgrading(&p).assessment_result,
        Some(AssessmentResult::Success)
    );
    let t = target(Some(&p.status), Kind::Pipeline, "p1");
    assert_eq!(
        t,
        Target {
            instance: Some("1".into()),
            hold: false
        }
    );
}

#[test]
fn an_unavailable_trial_controller_is_not_promoted_before_the_end() {
    let mut w = World::new("1.8.1");
    let p = started(&w);
    let mut trial = child("numaflow-controller-1", "1", "1.8.1");
    trial.available = Err("Deployment numaflow-controller-1 has 0 available replicas".into());
    w.children.push(trial);
    for wl in &mut w.workloads {
        wl.trial = Some(("trial", AssessmentResult::Success));
    }
    w.now = 30;
    let waiting = w.plan(Some(&p.status));
    assert_eq!(waiting.verdict, None);
    assert!(
        waiting
            .waiting_for
            .as_deref()
            .is_some_and(|m| m.contains("0 available replicas")),
        "{:?}",
        waiting.waiting_for
    );
    w.now = 301;
    let failed = w.plan(Some(&waiting.status));
    assert_eq!(failed.verdict, Some(AssessmentResult::Failure));
    assert!(upgrading(&failed).failure_reasons[0].contains("0 available replicas"));
}

#[test]
fn promotion_completes_once_every_workload_runs_on_the_trial_instance() {
    let mut w = World::new("1.8.1");
    let verdict = succeeded(&mut w);
    w.now = 40;
    let waiting = w.plan(Some(&verdict.status));
    assert!(waiting.status.upgrading_controller_status.is_some());
    assert!(
        waiting
            .waiting_for
            .as_deref()
            .is_some_and(|m| m.contains("ISBServiceRollout isb")),
        "{:?}",
        waiting.waiting_for
    );
    // The rollouts promoted their trials; the old pipelines still drain on the old instance.
    for wl in &mut w.workloads {
        wl.promoted_instance = Some("1");
    }
    w.in_use = BTreeSet::from([String::new(), "1".to_string()]);
    let swapped = w.plan(Some(&waiting.status));
    assert_eq!(swapped.status.upgrading_controller_status, None);
    assert_eq!(
        swapped
            .status
            .promoted_controller_status
            .as_ref()
            .map(|p| p.name.as_str()),
        Some("numaflow-controller-1")
    );
    assert_eq!(swapped.actions, vec![], "the old controller still drains");
    assert!(swapped.waiting_for.is_some());
    // Drained and gone: the old controller is deleted.
    w.in_use = BTreeSet::from(["1".to_string()]);
    let retired = w.plan(Some(&swapped.status));
    assert_eq!(retired.actions, vec![Action::Delete(NC.to_string())]);
    assert_eq!(retired.status, swapped.status);
    // Workloads stay on the promoted instance.
    assert_eq!(
        target(Some(&retired.status), Kind::MonoVertex, "mv").instance,
        Some("1".to_string())
    );
}

#[test]
fn one_failed_workload_fails_the_upgrade_and_everything_returns() {
    let mut w = World::new("1.8.1");
    let p = started(&w);
    w.children
        .push(child("numaflow-controller-1", "1", "1.8.1"));
    w.now = 30;
    w.workloads[1].trial = Some(("p1-1", AssessmentResult::Failure));
    let failed = w.plan(Some(&p.status));
    assert_eq!(failed.verdict, Some(AssessmentResult::Failure));
    assert_eq!(
        upgrading(&failed).failure_reasons,
        vec!["PipelineRollout p1: trial p1-1 failed".to_string()]
    );
    for (kind, rollout) in [(Kind::IsbService, "isb"), (Kind::Pipeline, "p2")] {
        assert_eq!(
            target(Some(&failed.status), kind, rollout),
            Target {
                instance: Some(String::new()),
                hold: false
            }
        );
    }
    // The trial controller stays while its trial workloads drain on it, then goes; the failure
    // stays recorded and no new trial starts for the same version.
    w.in_use = BTreeSet::from([String::new(), "1".to_string()]);
    let draining = w.plan(Some(&failed.status));
    assert_eq!(draining.actions, vec![]);
    assert_eq!(draining.status, failed.status);
    w.in_use = BTreeSet::from([String::new()]);
    let cleaned = w.plan(Some(&draining.status));
    assert_eq!(
        cleaned.actions,
        vec![Action::Delete("numaflow-controller-1".to_string())]
    );
    assert_eq!(cleaned.status, failed.status);
    // A new version starts a new trial under a new name.
    w.children.pop();
    w.desired = "1.8.2";
    let cleared = w.plan(Some(&cleaned.status));
    assert_eq!(cleared.status.upgrading_controller_status, None);
    let restarted = w.plan(Some(&cleared.status));
    assert_eq!(
        upgrading(&restarted).controller.name,
        "numaflow-controller-2"
    );
}

#[test]
fn changing_the_version_back_discontinues_the_trial() {
    let mut w = World::new("1.8.1");
    let p = started(&w);
    w.desired = "1.7.5";
    let back = w.plan(Some(&p.status));
    assert_eq!(back.verdict, Some(AssessmentResult::Failure));
    assert!(upgrading(&back).failure_reasons[0].starts_with("discontinued"));
    let cleared = w.plan(Some(&back.status));
    assert_eq!(cleared.status.upgrading_controller_status, None);
    assert_eq!(
        w.plan(Some(&cleared.status))
            .status
            .upgrading_controller_status,
        None,
        "back on the promoted version: no new trial"
    );
}

#[test]
fn the_end_fails_a_trial_whose_workloads_did_not_all_succeed() {
    let mut w = World::new("1.8.1");
    let p = started(&w);
    w.children
        .push(child("numaflow-controller-1", "1", "1.8.1"));
    w.workloads[0].trial = Some(("isb-1", AssessmentResult::Success));
    w.now = 300;
    let failed = w.plan(Some(&p.status));
    assert_eq!(failed.verdict, Some(AssessmentResult::Failure));
    let reasons = &upgrading(&failed).failure_reasons;
    assert!(
        reasons[0].contains("PipelineRollout p1") && !reasons[0].contains("ISBServiceRollout"),
        "{reasons:?}"
    );
}

#[test]
fn new_and_deleted_rollouts_join_and_leave_the_list() {
    let mut w = World::new("1.8.1");
    let p = started(&w);
    w.workloads.retain(|x| x.rollout != "mv");
    w.workloads.push(workload(Kind::MonoVertex, "mv2"));
    let next = w.plan(Some(&p.status));
    let names: Vec<String> = states(&next).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, vec!["isb", "p1", "p2", "mv2"]);
}

#[test]
fn planning_again_from_a_recorded_pass_changes_nothing_while_waiting() {
    let mut w = World::new("1.8.1");
    let p = started(&w);
    w.children
        .push(child("numaflow-controller-1", "1", "1.8.1"));
    w.now = 20;
    let once = w.plan(Some(&p.status));
    let twice = w.plan(Some(&once.status));
    assert_eq!(once.status, twice.status);
    assert_eq!(twice.actions, vec![]);
    assert_eq!(twice.verdict, None);
}

#[test]
fn without_trials_a_version_change_updates_the_promoted_controller_in_place() {
    let mut w = World::new("1.8.1");
    let verdict = succeeded(&mut w);
    for wl in &mut w.workloads {
        wl.promoted_instance = Some("1");
    }
    w.in_use = BTreeSet::from(["1".to_string()]);
    let swapped = w.plan(Some(&verdict.status));
    w.children.retain(|c| c.name != NC);
    // The namespace left progressive (or the rollout its opt-in): later versions apply in place,
    // to the controller the trial promoted, on its instance.
    w.trials = false;
    w.desired = "1.8.2";
    let p = w.plan(Some(&swapped.status));
    let want = ControllerInstance {
        name: "numaflow-controller-1".into(),
        instance_id: "1".into(),
        version: "1.8.2".into(),
    };
    assert_eq!(p.actions, vec![Action::Update(want.clone())]);
    assert_eq!(p.status.promoted_controller_status, Some(want));
    assert_eq!(p.status.upgrading_controller_status, None);
}
