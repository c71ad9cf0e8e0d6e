//! Memory and CPU of a process from `/proc`: `VmRSS`/`VmHWM` from `status`, user plus system
//! time from `stat`, and a background sampler of RSS for peak and steady (median) figures.

use anyhow::{Context, Result, bail};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `VmRSS` and `VmHWM` of a `/proc/<pid>/status` text, in KiB.
pub fn memory_kib(status: &str) -> Option<(u64, u64)> {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// `utime + stime` (clock ticks) of a `/proc/<pid>/stat` line. The command name is in
/// parentheses and may itself contain spaces or parentheses, so fields are counted after the
/// last `)`.
pub fn cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3 of stat(5), utime 14 and stime 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Clock ticks per second (`getconf CLK_TCK`; 100 on every Linux we run on).
pub fn ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// CPU seconds a process has used so far.
pub fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    match cpu_ticks(&stat) {
        Some(t) => Ok(t as f64 / ticks_per_second()),
        None => bail!("unexpected /proc/{pid}/stat: {stat}"),
    }
}

/// `(VmRSS, VmHWM)` of a process in KiB.
pub fn memory(pid: u32) -> Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    memory_kib(&status).with_context(|| format!("no VmRSS/VmHWM in /proc/{pid}/status"))
}

/// RSS samples (time, KiB) of one process, taken every `period` until dropped.
pub struct RssSampler {
    samples: Arc<Mutex<Vec<(Instant, u64)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl RssSampler {
    pub fn start(pid: u32, period: Duration) -> Self {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let sink = samples.clone();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            loop {
                tick.tick().await;
                // The process is gone: nothing more to sample.
                let Ok((rss, _)) = memory(pid) else { return };
                if let Ok(mut s) = sink.lock() {
                    s.push((Instant::now(), rss));
                }
            }
        });
        Self { samples, task }
    }

    /// Samples taken in `[from, to]`, in KiB.
    pub fn window(&self, from: Instant, to: Instant) -> Vec<u64> {
        self.samples
            .lock()
            .map(|s| {
                s.iter()
                    .filter(|(t, _)| *t >= from && *t <= to)
                    .map(|(_, v)| *v)
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for RssSampler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Median of samples (the mean of the middle two for an even count).
pub fn median(values: &[u64]) -> Option<f64> {
    let mut v = values.to_vec();
    v.sort_unstable();
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2] as f64),
        _ => Some((v[n / 2 - 1] + v[n / 2]) as f64 / 2.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_rss_and_high_water_mark() {
        let status = "Name:\tnumaplane\nVmPeak:\t  900000 kB\nVmHWM:\t   40960 kB\nVmRSS:\t   30720 kB\nThreads:\t4\n";
        assert_eq!(memory_kib(status), Some((30720, 40960)));
        assert_eq!(memory_kib("Name:\tx\n"), None);
    }

    #[test]
    fn cpu_ticks_skip_a_name_with_spaces_and_parens() {
        // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime ...
        let stat = "1234 (tokio (rt) x) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0";
        assert_eq!(cpu_ticks(stat), Some(300));
        assert_eq!(cpu_ticks("garbage"), None);
    }

    #[test]
    fn own_process_is_readable() {
        let pid = std::process::id();
        let (rss, hwm) = memory(pid).expect("memory");
        assert!(rss > 0 && hwm >= rss);
        assert!(cpu_seconds(pid).expect("cpu") >= 0.0);
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[5, 1, 3]), Some(3.0));
        assert_eq!(median(&[4, 1, 3, 2]), Some(2.5));
        assert_eq!(median(&[]), None);
    }
}
