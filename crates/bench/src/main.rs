//! `make bench`: the scale benchmark of issue #11. For each N it starts a fresh control plane
//! (etcd, kube-apiserver with an audit log of the operator identity, kube-controller-manager),
//! the Numaflow simulator and the `numaplane` binary as its own process, runs cold start, idle,
//! update storm and restart, and writes `bench/results.json`.

mod audit;
mod controller;
mod floor;
mod measure;
mod numaflow;
mod procfs;
mod progressive;
mod prom;
mod rbac;
mod report;
mod scenarios;
mod workload;

use anyhow::{Context, Result};
use clap::Parser;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "numaplane-bench",
    about = "Numaplane scale benchmark (issue #11)"
)]
struct Args {
    /// The controller binary under test (build it with --release).
    #[arg(long)]
    controller_bin: PathBuf,
    /// Numbers of PipelineRollouts to run with (each also gets N/10 MonoVertexRollouts).
    #[arg(long = "n", value_delimiter = ',', default_values_t = [100usize, 1000])]
    sizes: Vec<usize>,
    /// Length of the idle scenario, seconds.
    #[arg(long, default_value_t = 120)]
    idle_seconds: u64,
    /// Quiet period after convergence, counted in the scenario (steady RSS, trailing writes).
    #[arg(long, default_value_t = 10)]
    settle_seconds: u64,
    /// The controller's --workers (its default is 16).
    #[arg(long, default_value_t = 16)]
    workers: u16,
    /// Run the real stack (KWOK pods, the real Numaflow controller rendered by a
    /// NumaflowControllerRollout) instead of the Numaflow simulator.
    #[arg(long)]
    real_stack: bool,
    /// Concurrent reconciles per kind of the simulated Numaflow controller.
    #[arg(long, default_value_t = 8)]
    simulator_concurrency: u16,
    /// Run the progressive scenarios only for N up to this (at N=10,000 on two cores the
    /// simulator cannot bring 1,000 trial pipelines up within a 120 s window: give it a
    /// longer one with --assessment-end-seconds).
    #[arg(long)]
    progressive_max_n: Option<usize>,
    /// The end of the progressive trials' assessment window, seconds after it starts (the
    /// schedule is `0,<end>,5,1`); the half-failing run lasts at least this long.
    #[arg(long, default_value_t = 120)]
    assessment_end_seconds: u64,
    /// Only the cold start (the N rollouts the upgrades run beside) and the progressive
    /// scenarios: no floor, idle, update storm or restart.
    #[arg(long)]
    progressive_only: bool,
    /// Which of the three progressive runs to make (always in this order): progressive (all
    /// succeeding), progressive_half_failing, progressive_analysis (with AnalysisTemplates).
    #[arg(long, value_delimiter = ',', default_values_t = scenarios::PROGRESSIVE_RUNS.map(String::from))]
    progressive_scenarios: Vec<String>,
    /// After those, upgrade every progressive rollout this many times more, all succeeding
    /// (scenarios progressive_repeat_1, _2, ...): what repeated upgrades leave in memory.
    #[arg(long, default_value_t = 0)]
    progressive_repeat: usize,
    /// Give up on convergence after this many seconds.
    #[arg(long, default_value_t = 900)]
    converge_timeout_seconds: u64,
    /// Where logs and audit logs go.
    #[arg(long, default_value = "target/bench")]
    work_dir: PathBuf,
    /// The results file.
    #[arg(long, default_value = "bench/results.json")]
    out: PathBuf,
    /// The command to record in the results (default: this process's arguments).
    #[arg(long)]
    command: Option<String>,
}

#[tokio::main]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,kube=warn,kube_client=off,numaplane_testenv=warn".into()),
        )
        .init();
    let args = Args::parse();
    if let Some(bad) = args
        .progressive_scenarios
        .iter()
        .find(|r| !scenarios::PROGRESSIVE_RUNS.contains(&r.as_str()))
    {
        anyhow::bail!(
            "--progressive-scenarios: no scenario {bad:?} (one of {})",
            scenarios::PROGRESSIVE_RUNS.join(", ")
        );
    }
    let command = args
        .command
        .clone()
        .unwrap_or_else(|| std::env::args().collect::<Vec<_>>().join(" "));
    let controller_bin = args
        .controller_bin
        .canonicalize()
        .with_context(|| format!("controller binary {}", args.controller_bin.display()))?;
    std::fs::create_dir_all(&args.work_dir)?;
    let settings = scenarios::Settings {
        controller_binary: controller_bin,
        workers: args.workers,
        simulator_concurrency: args.simulator_concurrency,
        real_stack: args.real_stack,
        idle: Duration::from_secs(args.idle_seconds),
        settle: Duration::from_secs(args.settle_seconds),
        converge_timeout: Duration::from_secs(args.converge_timeout_seconds),
        progressive_max_n: args.progressive_max_n.unwrap_or(usize::MAX),
        schedule: progressive::Schedule {
            end_seconds: args.assessment_end_seconds,
        },
        progressive_only: args.progressive_only,
        progressive_scenarios: args.progressive_scenarios,
        progressive_repeat: args.progressive_repeat,
        work_dir: args.work_dir.canonicalize()?,
    };
    let machine = report::Machine::detect();
    let mut results = report::Results {
        machine: machine.summary(),
        command,
        scenarios: Vec::new(),
        floors: Vec::new(),
        rss_per_rollout_kib: None,
        method: report::method(),
        machine_detail: machine,
    };
    for n in &args.sizes {
        let (got, floor) = scenarios::run(*n, &settings)
            .await
            .with_context(|| format!("benchmark at N={n}"))?;
        results.floors.extend(floor);
        for s in &got {
            tracing::info!(
                name = s.name,
                n = s.n,
                wall = s.wall_seconds,
                rss_steady = s.rss_steady_mib,
                rss_peak = s.rss_peak_mib,
                cpu = s.cpu_seconds,
                requests = s.api_requests,
                writes = s.api_writes,
                writes_per_rollout = s.api_writes_per_rollout,
                p50_ms = s.reconcile_p50_ms,
                p99_ms = s.reconcile_p99_ms,
                wall_to_floor = s.wall_to_floor,
                wall_to_numaflow_floor = s.wall_to_numaflow_floor,
                "scenario"
            );
        }
        results.scenarios.extend(got);
        results.rss_per_rollout_kib = report::rss_per_rollout_kib(&results.scenarios);
        // Written after every N so a later failure keeps what was measured.
        write(&args.out, &results)?;
    }
    println!("results written to {}", args.out.display());
    Ok(())
}

fn write(path: &PathBuf, results: &report::Results) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, serde_json::to_string_pretty(results)? + "\n")
        .with_context(|| format!("writing {}", path.display()))
}
