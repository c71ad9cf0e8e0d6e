//! One measurement window: what the controller and the machine looked like when a scenario
//! started, turned into a [`Scenario`] record when it ends.

use crate::audit;
use crate::controller::Controller;
use crate::procfs::{self, RssSampler};
use crate::prom::{self, Buckets};
use crate::report::Scenario;
use anyhow::Result;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

const RECONCILE_HISTOGRAM: &str = "numaplane_reconcile_duration_seconds";
const DUE_STEP_HISTOGRAM: &str = "numaplane_due_step_delay_seconds";
const MIB: f64 = 1024.0;

/// Other processes whose CPU is worth reporting: name → pid.
pub type Others = Vec<(String, u32)>;

/// The control-plane processes recorded in the environment's `pids` file, by command name, plus
/// this process (which runs the simulator and the watcher).
pub fn other_processes(env_dir: &Path) -> Others {
    let pids = std::fs::read_to_string(env_dir.join("pids")).unwrap_or_default();
    let mut out: Others = pids
        .lines()
        .filter_map(|l| l.trim().parse::<u32>().ok())
        .filter_map(|pid| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
            Some((comm.trim().to_string(), pid))
        })
        .filter(|(name, _)| name != "sh")
        .collect();
    out.push(("bench+simulator".into(), std::process::id()));
    out
}

pub struct Window {
    pub started: Instant,
    audit_log: PathBuf,
    audit_mark: u64,
    reconciles: Buckets,
    due_steps: Buckets,
    controller_cpu: f64,
    others: Vec<(String, u32, f64)>,
}

impl Window {
    /// Opens a window; `controller` is `None` when none runs yet (the restart scenario), in which
    /// case its figures start from zero.
    pub async fn open(
        audit_log: &Path,
        controller: Option<&Controller>,
        others: &Others,
    ) -> Result<Self> {
        let (reconciles, due_steps, controller_cpu) = match controller {
            Some(c) => {
                let m = prom::parse(&c.metrics().await?);
                (
                    Buckets::of(&m, RECONCILE_HISTOGRAM),
                    Buckets::of(&m, DUE_STEP_HISTOGRAM),
                    procfs::cpu_seconds(c.pid())?,
                )
            }
            None => (Buckets::default(), Buckets::default(), 0.0),
        };
        Ok(Self {
            started: Instant::now(),
            audit_log: audit_log.to_path_buf(),
            audit_mark: audit::mark(audit_log)?,
            reconciles,
            due_steps,
            controller_cpu,
            others: others
                .iter()
                .map(|(name, pid)| (name.clone(), *pid, procfs::cpu_seconds(*pid).unwrap_or(0.0)))
                .collect(),
        })
    }

    /// When the operator's Pipeline and MonoVertex patches since the window opened reached the
    /// API server, by object name.
    pub fn child_patches(&self) -> Result<BTreeMap<String, Vec<f64>>> {
        crate::audit::child_patches_since(
            &self.audit_log,
            self.audit_mark,
            numaplane_testenv::controlplane::OPERATOR_USER,
        )
    }

    /// Closes the window. `steady_from` starts the period whose median RSS is the steady figure;
    /// `rollouts` divides the writes.
    #[allow(clippy::too_many_arguments)]
    pub async fn close(
        self,
        name: &str,
        n: usize,
        wall_seconds: f64,
        controller: &Controller,
        rss: &RssSampler,
        steady_from: Instant,
        rollouts: usize,
    ) -> Result<Scenario> {
        let end = Instant::now();
        let metrics = prom::parse(&controller.metrics().await?);
        let reconciles = Buckets::of(&metrics, RECONCILE_HISTOGRAM).since(&self.reconciles);
        let due_steps = Buckets::of(&metrics, DUE_STEP_HISTOGRAM).since(&self.due_steps);
        let due_ms = |q: f64| due_steps.quantile(q).map(|s| round3(s * 1000.0));
        let cpu = procfs::cpu_seconds(controller.pid())? - self.controller_cpu;
        let (_, hwm) = procfs::memory(controller.pid())?;
        let all = rss.window(self.started, end);
        let steady = rss.window(steady_from, end);
        let counts = audit::count_since(
            &self.audit_log,
            self.audit_mark,
            numaplane_testenv::controlplane::OPERATOR_USER,
        )?;
        let writes = counts.writes();
        let requests = if name == "idle" {
            counts.total() - counts.watches()
        } else {
            counts.total()
        };
        let per = |x: u64| {
            if rollouts == 0 {
                0.0
            } else {
                round3(x as f64 / rollouts as f64)
            }
        };
        let per_pipeline_rollout: Vec<u64> = crate::workload::pipeline_names(n)
            .iter()
            .map(|name| counts.writes_of_pipeline_rollout(name))
            .collect();
        let ms = |q: f64| reconciles.quantile(q).map_or(0.0, |s| round3(s * 1000.0));
        let other_cpu_seconds: BTreeMap<String, f64> = self
            .others
            .iter()
            .map(|(name, pid, before)| {
                let now = procfs::cpu_seconds(*pid).unwrap_or(*before);
                (name.clone(), round3(now - before))
            })
            .collect();
        Ok(Scenario {
            name: name.to_string(),
            n,
            wall_seconds: round3(wall_seconds),
            rss_steady_mib: steady_mib(&steady).unwrap_or(0.0),
            rss_peak_mib: round3(all.iter().max().copied().unwrap_or(0) as f64 / MIB),
            cpu_seconds: round3(cpu),
            api_requests: requests,
            api_writes: writes,
            api_writes_per_rollout: per(writes),
            reconcile_p50_ms: ms(0.5),
            reconcile_p99_ms: ms(0.99),
            rollouts,
            api_watches: counts.watches(),
            requests_by_verb_per_rollout: counts
                .by_verb
                .iter()
                .map(|(verb, n)| (verb.clone(), per(*n)))
                .collect(),
            requests_by_verb: counts.by_verb,
            writes_by_resource: counts.writes_by_resource,
            writes_per_pipeline_rollout_mean: if n == 0 {
                0.0
            } else {
                round3(per_pipeline_rollout.iter().sum::<u64>() as f64 / n as f64)
            },
            writes_per_pipeline_rollout_max: per_pipeline_rollout
                .iter()
                .copied()
                .max()
                .unwrap_or(0),
            reconciles: reconciles.count() as u64,
            converge_p50_seconds: None,
            converge_p99_seconds: None,
            vm_hwm_mib: round3(hwm as f64 / MIB),
            ready_seconds: None,
            wall_to_floor: None,
            wall_to_numaflow_floor: None,
            other_cpu_seconds,
            due_steps: (due_steps.count() > 0.0).then(|| due_steps.count() as u64),
            due_step_delay_p50_ms: due_ms(0.5),
            due_step_delay_p99_ms: due_ms(0.99),
            progressive: None,
        })
    }
}

/// The steady figure of RSS samples (KiB): their median, in MiB.
pub fn steady_mib(samples: &[u64]) -> Option<f64> {
    procfs::median(samples).map(|kib| round3(kib / MIB))
}

pub fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
