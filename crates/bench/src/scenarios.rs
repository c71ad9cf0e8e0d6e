//! The scenarios for one N, in order on one fresh control plane: cold start, idle, update storm,
//! restart, then progressive upgrades at scale (all succeeding, then half failing).

use crate::controller::{Controller, Launch};
use crate::measure::{Window, other_processes};
use crate::procfs::RssSampler;
use crate::report::Scenario;
use crate::workload::{self, Expect, Watcher};
use crate::{prom, rbac};
use anyhow::{Context, Result};
use kube::Api;
use numaplane_api::{ISBServiceRollout, MonoVertexRollout, PipelineRollout};
use numaplane_testenv::simulator::SimulatorConfig;
use numaplane_testenv::{Simulator, TestEnv, TestEnvOptions};
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tracing::info;

/// The progressive runs, in the order they are made.
pub const PROGRESSIVE_RUNS: [&str; 3] = [
    "progressive",
    "progressive_half_failing",
    "progressive_analysis",
];

const RSS_PERIOD: Duration = Duration::from_millis(500);
const READY_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Debug, Clone)]
pub struct Settings {
    pub controller_binary: PathBuf,
    pub workers: u16,
    pub simulator_concurrency: u16,
    pub real_stack: bool,
    pub idle: Duration,
    pub settle: Duration,
    pub converge_timeout: Duration,
    /// The largest N the progressive scenarios run at.
    pub progressive_max_n: usize,
    /// The progressive rollouts' assessment schedule.
    pub schedule: crate::progressive::Schedule,
    /// Only the cold start (the N rollouts the upgrades run beside) and the progressive
    /// scenarios: no floor, idle, update storm or restart.
    pub progressive_only: bool,
    /// Which of [`PROGRESSIVE_RUNS`] to make (in that order, whatever the order given).
    pub progressive_scenarios: Vec<String>,
    /// All-succeeding upgrades made again after those, each its own scenario.
    pub progressive_repeat: usize,
    pub work_dir: PathBuf,
}

/// Measures the API server's floor, then runs every scenario for `n` PipelineRollouts (only the
/// cold start and the progressive ones, without the floor, when `progressive_only`).
/// (Long: the scenarios share one control plane, controller and watcher, in order.)
pub async fn run(n: usize, s: &Settings) -> Result<(Vec<Scenario>, Option<crate::floor::Floor>)> {
    let dir = s.work_dir.join(format!("n{n}"));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let audit_log = dir.join("audit.log");
    let _ = std::fs::remove_file(&audit_log);
    info!(n, "starting the control plane");
    let mut env = TestEnv::start_with(TestEnvOptions {
        audit_log: Some(audit_log.clone()),
        audit_policy: Some(crate::audit::policy_for(
            numaplane_testenv::controlplane::OPERATOR_USER,
        )),
        real_stack: s.real_stack,
        ..TestEnvOptions::default()
    })
    .await?;
    let client = env.client();
    rbac::install(&client).await?;
    let floor = if s.progressive_only {
        None
    } else {
        Some(floors(&env, n, s).await?)
    };
    let ns = env.try_create_namespace("bench").await?;
    let _sim = if s.real_stack {
        None
    } else {
        Some(
            Simulator::start_with(
                client.clone(),
                SimulatorConfig {
                    namespace: Some(ns.clone()),
                    concurrency: s.simulator_concurrency,
                    ..SimulatorConfig::default()
                },
            )
            .await?,
        )
    };
    let watcher = Watcher::start(&client, &ns);
    let launch = Launch {
        binary: s.controller_binary.clone(),
        kubeconfig: env.operator_kubeconfig_path(),
        config_file: crate::controller::write_config(&dir)?,
        namespace: ns.clone(),
        workers: s.workers,
        log_dir: dir.clone(),
    };
    let others = other_processes(env.dir());
    // As installed: the operator starts with the shipped USDE config.
    crate::progressive::install_usde(&client).await?;
    let mut controller = Controller::start(&launch, "numaplane-1")?;
    controller.wait_ready(READY_TIMEOUT).await?;
    if s.real_stack {
        crate::numaflow::install(&client, &ns, READY_TIMEOUT).await?;
    }
    let mut rss = RssSampler::start(controller.pid(), RSS_PERIOD);

    let prs: Api<PipelineRollout> = Api::namespaced(client.clone(), &ns);
    let mvrs: Api<MonoVertexRollout> = Api::namespaced(client.clone(), &ns);
    let isbrs: Api<ISBServiceRollout> = Api::namespaced(client.clone(), &ns);
    let pr_names = workload::pipeline_names(n);
    let mvr_names = workload::monovertex_names(n);
    let all = n + mvr_names.len() + 1;
    let mut out = Vec::new();

    // 1. Cold start.
    info!(n, "cold_start");
    let w = Window::open(&audit_log, Some(&controller), &others).await?;
    let isb_gen = workload::apply_all(&isbrs, vec![workload::isbsvc_rollout()]).await?;
    let (pr_gen, mvr_gen) = tokio::try_join!(
        workload::apply_all(
            &prs,
            pr_names
                .iter()
                .map(|p| workload::pipeline_rollout(p, 5))
                .collect()
        ),
        workload::apply_all(
            &mvrs,
            mvr_names
                .iter()
                .map(|m| workload::monovertex_rollout(m))
                .collect()
        ),
    )?;
    let mut expect = Expect {
        pipelines: pr_gen,
        monovertices: mvr_gen,
        isbsvcs: isb_gen,
    };
    let conv = watcher.wait(&expect, w.started, s.converge_timeout).await?;
    info!(n, seconds = conv.wall.as_secs_f64(), "cold_start converged");
    let steady_from = Instant::now();
    tokio::time::sleep(s.settle).await;
    let mut sc = w
        .close(
            "cold_start",
            n,
            conv.wall.as_secs_f64(),
            &controller,
            &rss,
            steady_from,
            all,
        )
        .await?;
    with_convergence(&mut sc, &conv.per_object);
    out.push(sc);

    if !s.progressive_only {
        // 2. Idle.
        info!(n, seconds = s.idle.as_secs(), "idle");
        let w = Window::open(&audit_log, Some(&controller), &others).await?;
        tokio::time::sleep(s.idle).await;
        let started = w.started;
        out.push(
            w.close(
                "idle",
                n,
                s.idle.as_secs_f64(),
                &controller,
                &rss,
                started,
                all,
            )
            .await?,
        );

        // 3. Update storm: a direct-apply change to every PipelineRollout.
        info!(n, "update_storm");
        let w = Window::open(&audit_log, Some(&controller), &others).await?;
        expect.pipelines = workload::apply_all(
            &prs,
            pr_names
                .iter()
                .map(|p| workload::pipeline_rollout(p, 6))
                .collect(),
        )
        .await?;
        let storm_only = Expect {
            pipelines: expect.pipelines.clone(),
            ..Expect::default()
        };
        let conv = watcher
            .wait(&storm_only, w.started, s.converge_timeout)
            .await?;
        info!(
            n,
            seconds = conv.wall.as_secs_f64(),
            "update_storm converged"
        );
        let steady_from = Instant::now();
        tokio::time::sleep(s.settle).await;
        let mut sc = w
            .close(
                "update_storm",
                n,
                conv.wall.as_secs_f64(),
                &controller,
                &rss,
                steady_from,
                n,
            )
            .await?;
        with_convergence(&mut sc, &conv.per_object);
        out.push(sc);

        // 4. Restart: SIGKILL with everything Deployed, start a new process.
        info!(n, "restart");
        controller.kill()?;
        drop(rss);
        let w = Window::open(&audit_log, None, &others).await?;
        controller = Controller::start(&launch, "numaplane-2")?;
        rss = RssSampler::start(controller.pid(), RSS_PERIOD);
        let ready = controller.wait_ready(READY_TIMEOUT).await?;
        watcher.wait(&expect, w.started, s.converge_timeout).await?;
        let want = [
            ("pipeline_rollout_syncs_total", n),
            ("monovertex_rollout_syncs_total", n / 10),
            ("isb_service_rollout_syncs_total", 1),
        ];
        wait_reconciled(&controller, &want, s.converge_timeout).await?;
        let wall = w.started.elapsed();
        info!(
            n,
            seconds = wall.as_secs_f64(),
            "restart reconciled everything"
        );
        let steady_from = Instant::now();
        tokio::time::sleep(s.settle).await;
        let mut sc = w
            .close(
                "restart",
                n,
                wall.as_secs_f64(),
                &controller,
                &rss,
                steady_from,
                all,
            )
            .await?;
        sc.ready_seconds = Some(crate::measure::round3(ready.as_secs_f64()));
        out.push(sc);
    }

    // 5. Progressive upgrades at scale: N/10 + N/10 rollouts under progressive, all upgraded at
    // once; then again with every other trial failing; then again judged by AnalysisRuns too
    // (the real Argo Rollouts analysis controller and Prometheus, started only for that run so
    // that their load does not weigh on the others); then, if asked, all succeeding again and
    // again, to show what repeated upgrades leave in memory.
    if n <= s.progressive_max_n {
        use crate::progressive as prog;
        prog::configure(&client, &ns).await?;
        let observer = prog::Observer::start(env.config(), &ns)?;
        let (p, m) = prog::apply(&client, &ns, n, "stable", false, s.schedule, |_| false).await?;
        observer
            .settle(&prog::merged(p, m), s.converge_timeout)
            .await?;
        let settled = Instant::now();
        tokio::time::sleep(s.settle).await;
        let rss_before = crate::measure::steady_mib(&rss.window(settled, Instant::now()));
        info!(n, ?rss_before, "progressive rollouts created");
        let mut upgrades = Upgrades {
            env: &mut env,
            client: &client,
            ns: &ns,
            n,
            s,
            observer: &observer,
            audit_log: &audit_log,
            controller: &controller,
            others: &others,
            rss: &rss,
            dir: &dir,
            rss_before,
        };
        for run in progressive_runs(&s.progressive_scenarios, s.progressive_repeat) {
            out.push(upgrades.run(&run).await?);
        }
        drop(observer);
    }

    drop(controller);
    drop(watcher);
    drop(env);
    for sc in &mut out {
        let Some(floor) = &floor else { break };
        // (not for the fixed-length idle, nor the progressive runs, paced by their schedule)
        if !sc.name.starts_with("idle")
            && !sc.name.starts_with("progressive")
            && floor.wall_seconds > 0.0
        {
            sc.wall_to_floor = Some(crate::measure::round3(sc.wall_seconds / floor.wall_seconds));
            sc.wall_to_numaflow_floor = floor
                .with_numaflow_seconds
                .filter(|f| *f > 0.0)
                .map(|f| crate::measure::round3(sc.wall_seconds / f));
        }
    }
    Ok((out, floor))
}

/// One progressive run: its scenario name, the image tag it upgrades to, whether every other
/// trial fails, whether AnalysisTemplates judge it too.
struct Run {
    name: String,
    tag: String,
    half_fail: bool,
    analysis: bool,
}

/// The progressive runs asked for, in order: the chosen ones of [`PROGRESSIVE_RUNS`], then
/// `repeat` more all succeeding.
fn progressive_runs(chosen: &[String], repeat: usize) -> Vec<Run> {
    let chosen = PROGRESSIVE_RUNS
        .into_iter()
        .zip([
            ("v1", false, false),
            ("v2", true, false),
            ("v3", false, true),
        ])
        .filter(|(name, _)| chosen.iter().any(|r| r == name))
        .map(|(name, (tag, half_fail, analysis))| Run {
            name: name.to_string(),
            tag: tag.to_string(),
            half_fail,
            analysis,
        });
    let repeats = (1..=repeat).map(|i| Run {
        name: format!("progressive_repeat_{i}"),
        tag: format!("r{i}"),
        half_fail: false,
        analysis: false,
    });
    chosen.chain(repeats).collect()
}

/// What every progressive run measures with.
struct Upgrades<'a> {
    env: &'a mut TestEnv,
    client: &'a kube::Client,
    ns: &'a str,
    n: usize,
    s: &'a Settings,
    observer: &'a crate::progressive::Observer,
    audit_log: &'a std::path::Path,
    controller: &'a Controller,
    others: &'a crate::measure::Others,
    rss: &'a RssSampler,
    dir: &'a std::path::Path,
    /// The controller's steady RSS with the progressive rollouts created, before any upgrade.
    rss_before: Option<f64>,
}

impl Upgrades<'_> {
    /// Upgrades every progressive rollout at once and measures until each trial is judged.
    async fn run(&mut self, run: &Run) -> Result<Scenario> {
        use crate::progressive as prog;
        let (n, s) = (self.n, self.s);
        let fails = |i: usize| run.half_fail && i.is_multiple_of(2);
        if run.analysis {
            if !s.real_stack {
                self.env.start_analysis_path().await?;
            }
            prog::apply_templates(self.client, self.ns).await?;
        }
        info!(n, name = run.name, "progressive upgrades");
        let w = Window::open(self.audit_log, Some(self.controller), self.others).await?;
        let (p, m) = prog::apply(
            self.client,
            self.ns,
            n,
            &run.tag,
            run.analysis,
            s.schedule,
            fails,
        )
        .await?;
        let want = prog::merged(p, m);
        let fails_name = |rollout: &str| {
            rollout
                .rsplit_once('-')
                .and_then(|(_, i)| i.parse::<usize>().ok())
                .is_some_and(fails)
        };
        let (wall, judged) = self
            .observer
            .wait(&want, &fails_name, s.schedule, s.converge_timeout)
            .await?;
        let judged = judged.with_patches(&w.child_patches()?);
        let mut figures = judged.figures();
        std::fs::write(
            self.dir.join(format!("{}-trials.tsv", run.name)),
            judged.table(),
        )?;
        info!(
            n,
            name = run.name,
            seconds = wall.as_secs_f64(),
            ?figures,
            "progressive upgrades judged"
        );
        let steady_from = Instant::now();
        tokio::time::sleep(s.settle).await;
        let mut sc = w
            .close(
                &run.name,
                n,
                wall.as_secs_f64(),
                self.controller,
                self.rss,
                steady_from,
                want.len(),
            )
            .await?;
        figures.api_requests_per_upgrade =
            crate::measure::round3(sc.api_requests as f64 / want.len().max(1) as f64);
        figures.rss_before_upgrades_mib = self.rss_before;
        sc.progressive = Some(figures);
        Ok(sc)
    }
}

fn with_convergence(sc: &mut Scenario, per_object: &[f64]) {
    sc.converge_p50_seconds = workload::nearest_rank(per_object, 0.5).map(crate::measure::round3);
    sc.converge_p99_seconds = workload::nearest_rank(per_object, 0.99).map(crate::measure::round3);
}

/// Waits until the controller has started at least `want` reconciles per counter.
async fn wait_reconciled(
    controller: &Controller,
    want: &[(&str, usize)],
    timeout: Duration,
) -> Result<()> {
    let start = Instant::now();
    loop {
        let samples = prom::parse(&controller.metrics().await?);
        let short: HashMap<&str, f64> = want
            .iter()
            .map(|(name, n)| (*name, prom::sum(&samples, name) - *n as f64))
            .filter(|(_, d)| *d < 0.0)
            .collect();
        if short.is_empty() {
            return Ok(());
        }
        anyhow::ensure!(
            start.elapsed() < timeout,
            "reconciles missing after {timeout:?}: {short:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The API server's floor, first while nothing else runs, then with a Numaflow stand-in of the
/// cold start's settings reacting (its objects stay in their own namespaces, outside the
/// operator's and the stand-in's).
async fn floors(env: &TestEnv, n: usize, s: &Settings) -> Result<crate::floor::Floor> {
    let client = env.client();
    let floor_ns = env.try_create_namespace("floor").await?;
    info!(n, "api-server floor");
    let mut floor = crate::floor::measure(&client, &floor_ns, n, usize::from(s.workers)).await?;
    info!(
        n,
        seconds = floor.wall_seconds,
        operator_writes_seconds = floor.operator_writes_seconds,
        "api-server floor measured"
    );
    if !s.real_stack {
        // The same writes again, with a Numaflow stand-in of the cold start's settings reacting
        // to them in their own namespace; stopped before the scenarios.
        let floor_ns = env.try_create_namespace("floor-numaflow").await?;
        let sim = Simulator::start_with(
            client.clone(),
            SimulatorConfig {
                namespace: Some(floor_ns.clone()),
                concurrency: s.simulator_concurrency,
                ..SimulatorConfig::default()
            },
        )
        .await?;
        let seconds =
            crate::floor::measure_with_numaflow(&client, &floor_ns, n, usize::from(s.workers))
                .await?;
        drop(sim);
        info!(
            n,
            seconds, "api-server floor with the Numaflow stand-in measured"
        );
        floor.with_numaflow_seconds = Some(seconds);
    }
    Ok(floor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_upgrades_follow_the_chosen_runs_each_to_a_new_image() {
        let runs = progressive_runs(&["progressive_analysis".into(), "progressive".into()], 2);
        let got: Vec<(&str, &str, bool, bool)> = runs
            .iter()
            .map(|r| (r.name.as_str(), r.tag.as_str(), r.half_fail, r.analysis))
            .collect();
        assert_eq!(
            got,
            [
                ("progressive", "v1", false, false),
                ("progressive_analysis", "v3", false, true),
                ("progressive_repeat_1", "r1", false, false),
                ("progressive_repeat_2", "r2", false, false),
            ]
        );
        assert!(progressive_runs(&[], 0).is_empty());
    }
}
