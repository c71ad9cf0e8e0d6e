//! `bench/results.json`: the machine, the command and one record per scenario and N. The first
//! eleven fields of a scenario are the required shape; the rest explain them.

use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Serialize)]
pub struct Results {
    pub machine: String,
    pub command: String,
    pub scenarios: Vec<Scenario>,
    /// The API server's own capacity for each N, measured before its scenarios (`floor.rs`).
    pub floors: Vec<crate::floor::Floor>,
    /// Steady RSS each further rollout (with its child in the cache) costs, KiB: the slope of
    /// the cold start's steady RSS between the smallest and the largest N of the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_per_rollout_kib: Option<f64>,
    /// How each figure is measured.
    pub method: BTreeMap<&'static str, &'static str>,
    pub machine_detail: Machine,
}

#[derive(Debug, Default, Serialize)]
pub struct Scenario {
    pub name: String,
    pub n: usize,
    pub wall_seconds: f64,
    pub rss_steady_mib: f64,
    pub rss_peak_mib: f64,
    pub cpu_seconds: f64,
    pub api_requests: u64,
    pub api_writes: u64,
    pub api_writes_per_rollout: f64,
    pub reconcile_p50_ms: f64,
    pub reconcile_p99_ms: f64,
    // Extras.
    /// Rollouts the per-rollout figure divides by (created, updated or re-read).
    pub rollouts: usize,
    pub api_watches: u64,
    pub requests_by_verb: BTreeMap<String, u64>,
    /// `requests_by_verb` divided by `rollouts` (watches included).
    pub requests_by_verb_per_rollout: BTreeMap<String, f64>,
    pub writes_by_resource: BTreeMap<String, u64>,
    /// Writes each PipelineRollout caused (to it, its status, its Pipelines and Events about
    /// it): the mean and the largest.
    pub writes_per_pipeline_rollout_mean: f64,
    pub writes_per_pipeline_rollout_max: u64,
    pub reconciles: u64,
    pub converge_p50_seconds: Option<f64>,
    pub converge_p99_seconds: Option<f64>,
    /// `VmHWM` at the end of the scenario (the process's lifetime peak).
    pub vm_hwm_mib: f64,
    /// Restart only: seconds until `/readyz` answered 200.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready_seconds: Option<f64>,
    /// `wall_seconds` divided by the floor's (the API server's own time for a cold start's
    /// writes at this N); not for idle, whose length is fixed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wall_to_floor: Option<f64>,
    /// `wall_seconds` divided by the floor's `with_numaflow_seconds` (the same writes with the
    /// Numaflow stand-in bringing every child up).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wall_to_numaflow_floor: Option<f64>,
    /// CPU seconds of the other processes on the machine during the scenario.
    pub other_cpu_seconds: BTreeMap<String, f64>,
    /// Steps that fell due (progressive verdicts) and how long after their moment their pass
    /// started, p50 and p99 in ms; absent when none fell due.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub due_steps: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub due_step_delay_p50_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub due_step_delay_p99_ms: Option<f64>,
    /// The progressive scenarios' own figures (verdicts and their lateness).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progressive: Option<crate::progressive::Figures>,
}

#[derive(Debug, Default, Serialize)]
pub struct Machine {
    pub cores: usize,
    pub cpu_model: String,
    pub memory_gib: f64,
    pub kernel: String,
}

/// The slope of the cold start's steady RSS over the rollouts it ran with, KiB per rollout.
pub fn rss_per_rollout_kib(scenarios: &[Scenario]) -> Option<f64> {
    let cold: Vec<&Scenario> = scenarios
        .iter()
        .filter(|s| s.name == "cold_start")
        .collect();
    let small = cold.iter().min_by_key(|s| s.rollouts)?;
    let large = cold.iter().max_by_key(|s| s.rollouts)?;
    let more = large
        .rollouts
        .checked_sub(small.rollouts)
        .filter(|d| *d > 0)?;
    Some((large.rss_steady_mib - small.rss_steady_mib) * 1024.0 / more as f64)
}

impl Machine {
    pub fn detect() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        Self::from_proc(&cpuinfo, &meminfo, kernel.trim())
    }

    pub fn from_proc(cpuinfo: &str, meminfo: &str, kernel: &str) -> Self {
        let cores = cpuinfo
            .lines()
            .filter(|l| l.starts_with("processor"))
            .count();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|rest| rest.split_once(':'))
            .map(|(_, m)| m.trim().to_string())
            .unwrap_or_else(|| "unknown CPU".into());
        let mem_kib: f64 = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0.0);
        Self {
            cores,
            cpu_model,
            memory_gib: (mem_kib / 1024.0 / 1024.0 * 10.0).round() / 10.0,
            kernel: kernel.to_string(),
        }
    }

    pub fn summary(&self) -> String {
        format!(
            "{} cores ({}), {} GiB RAM, Linux {}",
            self.cores, self.cpu_model, self.memory_gib, self.kernel
        )
    }
}

pub fn method() -> BTreeMap<&'static str, &'static str> {
    BTreeMap::from([
        (
            "floors",
            "before an N's scenarios, on the same control plane in a namespace of its own, with no operator and no Numaflow stand-in running: a plain admin client applies the same rollouts as the cold start, then writes for each what the operator writes for a new rollout (finalizer patch, child apply with the rollout's spec, one Event, one status apply), at the operator's concurrency (--workers); wall_seconds covers both, operator_writes_seconds the second part. It leaves out the operator's reads and the Numaflow stand-in's writes. with_numaflow_seconds: the same writes again in another namespace while a Numaflow stand-in of the cold start's settings (its own, scoped to that namespace) reacts to them, from the first write until every child reports phase Running: the stand-in's writes (child statuses, vertices, pods) and waits included, the operator's reads and its waits not",
        ),
        (
            "wall_to_numaflow_floor",
            "the scenario's wall_seconds / the floor's with_numaflow_seconds at the same N",
        ),
        (
            "wall_to_floor",
            "the scenario's wall_seconds / the floor's wall_seconds at the same N",
        ),
        (
            "wall_seconds",
            "cold_start/update_storm: first user request until an independent watcher sees every rollout Deployed, observedGeneration == generation and ChildResourcesHealthy=True; idle: the idle period; restart: controller spawn until /readyz is 200, every rollout was reconciled once (the *_syncs_total counters) and all are converged",
        ),
        (
            "rss_steady_mib",
            "median VmRSS of the controller (sampled every 500 ms) over the settle period after convergence; idle: over the whole idle period",
        ),
        (
            "rss_peak_mib",
            "largest sampled VmRSS during the scenario (vm_hwm_mib is the kernel's lifetime peak)",
        ),
        (
            "cpu_seconds",
            "utime+stime of the controller process during the scenario (/proc/<pid>/stat)",
        ),
        (
            "api_requests",
            "requests by the operator identity in the apiserver audit log during the scenario, a watch counted once when it opens; watches excluded for idle only (api_watches has them)",
        ),
        (
            "api_writes",
            "create+update+patch+delete+deletecollection by the operator identity, Events included",
        ),
        (
            "api_writes_per_rollout",
            "api_writes / rollouts (every rollout kind; the ISBServiceRollout's PodDisruptionBudget included)",
        ),
        (
            "requests_by_verb_per_rollout",
            "requests_by_verb / rollouts, watches included",
        ),
        (
            "writes_per_pipeline_rollout_max",
            "the most writes one PipelineRollout caused: to it and its status, to its Pipelines (<rollout>-<index>) and Events about it (<rollout>.<suffix>), from the audit log's object names; _mean is their average",
        ),
        (
            "reconcile_p50_ms",
            "histogram_quantile-style interpolation over the difference of numaplane_reconcile_duration_seconds buckets (all controllers) scraped before and after the scenario; 0 when no reconcile ran",
        ),
        (
            "due_step_delay_p50_ms",
            "interpolated like reconcile_p50_ms over numaplane_due_step_delay_seconds: from the moment a scheduled step (a progressive verdict: the end of a healthy period, a finished AnalysisRun) fell due to the start of the pass that takes it; due_steps counts them",
        ),
        (
            "rss_per_rollout_kib",
            "(cold_start rss_steady_mib at the largest N - at the smallest N) * 1024 / (their difference in rollouts): what one more rollout and its child cost in memory, fixed costs cancelled out",
        ),
        (
            "converge_p50_seconds",
            "per-rollout time from the scenario start until the watcher first saw it converged",
        ),
        (
            "progressive",
            "progressive scenarios: N/10 PipelineRollouts and N/10 MonoVertexRollouts under the progressive strategy (schedule 0,<end>,5,1, assessment_schedule in each run; end 120 s unless --assessment-end-seconds), all given a new image at once: progressive, progressive_half_failing (every other trial never comes up), progressive_analysis (also judged by the AnalysisTemplates shipped in config/samples/analysis-templates.yaml, 8 measurements a second apart, by the real Argo Rollouts analysis controller and Prometheus, started just before this run); wall_seconds until every trial is promoted, its rollout Deployed and the replaced child deleted (or the trial labelled failed: the half made to fail, and any other, counted as failed_unexpectedly); api_writes_per_rollout and api_requests_per_upgrade divide by the upgrades; promotion lateness = when the benchmark's own watch saw the trial labelled promoted - the later of (trialWindowStartTime + period) and when it saw the trial's AnalysisRun finished, promotion write lateness = when the API server received the trial's label flip (the operator's first patch of the trial more than 1 s after trialWindowStartTime, from the audit log) - the same due time; failure lateness = when it saw it labelled failed - (basicAssessmentStartTime + end + 1 s); trial_up = when the watch first saw the trial up (phase Running, every condition True; before any failure label) - when it first saw it (the simulator's bring-up), window_after_up = trialWindowStartTime - that (the operator noticing), failed_never_up = unexpected failures never seen up; every trial's times in <work dir>/n<N>/<scenario>-trials.tsv; progressive_repeat_<i> (--progressive-repeat): the all-succeeding upgrade made again, i times after the others, each to a new image; rss_before_upgrades_mib = the controller's steady RSS once the progressive rollouts were created and settled, before the first upgrade",
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machine_from_proc_files() {
        let cpuinfo = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Processor\n\nprocessor\t: 1\nmodel name\t: Intel(R) Xeon(R) Processor\n";
        let meminfo = "MemTotal:       24683520 kB\nMemFree: 1 kB\n";
        let m = Machine::from_proc(cpuinfo, meminfo, "6.1.0");
        assert_eq!(m.cores, 2);
        assert_eq!(m.cpu_model, "Intel(R) Xeon(R) Processor");
        assert_eq!(m.memory_gib, 23.5);
        assert_eq!(
            m.summary(),
            "2 cores (Intel(R) Xeon(R) Processor), 23.5 GiB RAM, Linux 6.1.0"
        );
    }

    #[test]
    fn rss_per_rollout_is_the_slope_between_the_smallest_and_largest_n() {
        let cold = |rollouts, rss| Scenario {
            name: "cold_start".into(),
            rollouts,
            rss_steady_mib: rss,
            ..Scenario::default()
        };
        let idle = Scenario {
            name: "idle".into(),
            rollouts: 1,
            rss_steady_mib: 1.0,
            ..Scenario::default()
        };
        let got = rss_per_rollout_kib(&[cold(111, 30.0), idle, cold(11_001, 100.0)]);
        assert_eq!(got, Some(70.0 * 1024.0 / 10_890.0));
        assert_eq!(rss_per_rollout_kib(&[cold(111, 30.0)]), None);
    }

    #[test]
    fn scenario_serialises_the_required_keys() {
        let s = Scenario {
            name: "idle".into(),
            n: 100,
            ..Scenario::default()
        };
        let v = serde_json::to_value(&s).expect("json");
        for key in [
            "name",
            "n",
            "wall_seconds",
            "rss_steady_mib",
            "rss_peak_mib",
            "cpu_seconds",
            "api_requests",
            "api_writes",
            "api_writes_per_rollout",
            "reconcile_p50_ms",
            "reconcile_p99_ms",
        ] {
            assert!(v.get(key).is_some(), "missing {key}");
        }
        assert!(v["n"].is_u64() && v["wall_seconds"].is_f64() && v["api_writes"].is_u64());
    }
}
