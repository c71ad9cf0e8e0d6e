//! Counting every message of Numaflow's real data plane (docs/dataplane.md): the pipelines and
//! MonoVertices of the counting source, map and sink (`dataplane/counting`), the directory they
//! record into (a hostPath the real node's pods share with this process) and the tally read
//! from it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use numaplane_testenv::binaries::COUNTING_IMAGE;
use serde_json::{Value, json};

tokio::task_local! {
    /// The namespaces a scenario's harnesses made, so that its runner can remove them when the
    /// scenario fails: their pods would otherwise hold the real node's capacity and starve the
    /// scenarios after it.
    pub static SCENARIO_NAMESPACES: std::sync::Arc<std::sync::Mutex<Vec<String>>>;
}

/// Messages a second each counting source emits.
pub const RATE: u32 = 20;

/// The directory one scenario's sources and sinks record into.
pub struct CountDir {
    dir: Option<tempfile::TempDir>,
}

impl Drop for CountDir {
    /// A failed scenario keeps its records for a look.
    fn drop(&mut self) {
        if std::thread::panicking()
            && let Some(dir) = self.dir.take()
        {
            eprintln!("the counts stay in {}", dir.keep().display());
        }
    }
}

impl CountDir {
    pub fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("numaplane-counting-")
            .tempdir()
            .expect("a directory for the counts");
        Self { dir: Some(dir) }
    }

    pub fn path(&self) -> &Path {
        match &self.dir {
            Some(d) => d.path(),
            None => Path::new("/nonexistent"),
        }
    }

    /// Tells every source to stop emitting (they keep answering Numaflow).
    pub fn stop_sources(&self) {
        std::fs::write(self.path().join("stop"), b"").expect("write the stop file");
    }

    /// What the files say now.
    pub fn read(&self) -> Counts {
        Counts::read(self.path())
    }

    /// Waits until `n` more messages than now have been delivered (messages flow).
    pub async fn flowing(&self, n: usize, bound: Duration, what: &str) {
        let from = self.read().deliveries.len();
        let start = Instant::now();
        loop {
            let now = self.read().deliveries.len();
            if now >= from + n {
                return;
            }
            assert!(
                start.elapsed() < bound,
                "{what}: {} of {n} more deliveries after {bound:?} (at {now})",
                now.saturating_sub(from)
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Stops the sources and waits until every produced message was delivered, or until no
    /// delivery came for `quiet` (what is missing then is lost); returns the tally.
    pub async fn finish(&self, quiet: Duration) -> Tally {
        let stopped_at = now_ms();
        self.stop_sources();
        let mut last = (self.read().deliveries.len(), Instant::now());
        loop {
            let counts = self.read();
            if counts.missing().is_empty() && Instant::now() > last.1 + Duration::from_secs(2) {
                return counts.tally(stopped_at);
            }
            if counts.deliveries.len() != last.0 {
                last = (counts.deliveries.len(), Instant::now());
            } else if last.1.elapsed() > quiet {
                return counts.tally(stopped_at);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn lines(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let text = std::fs::read_to_string(e.path()).unwrap_or_default();
        // A line being written has no newline yet: the next read has it.
        let complete = text.rfind('\n').map_or("", |end| &text[..end]);
        out.extend(complete.lines().map(str::to_string));
    }
    out
}

/// Every acknowledged message and every delivery, as recorded.
pub struct Counts {
    pub produced: BTreeSet<String>,
    /// `(unix ms, message)` in no particular order.
    pub deliveries: Vec<(i64, String)>,
}

impl Counts {
    fn read(dir: &Path) -> Self {
        let produced = lines(&dir.join("produced")).into_iter().collect();
        let deliveries = lines(&dir.join("delivered"))
            .into_iter()
            .filter_map(|l| {
                let (ms, msg) = l.split_once(' ')?;
                Some((ms.parse().ok()?, msg.to_string()))
            })
            .collect();
        Self {
            produced,
            deliveries,
        }
    }

    fn missing(&self) -> Vec<&String> {
        let delivered: BTreeSet<&String> = self.deliveries.iter().map(|(_, m)| m).collect();
        self.produced
            .iter()
            .filter(|m| !delivered.contains(m))
            .collect()
    }

    fn tally(&self, stopped_at: i64) -> Tally {
        let mut per_message: BTreeMap<&str, usize> = BTreeMap::new();
        for (_, m) in &self.deliveries {
            *per_message.entry(m).or_default() += 1;
        }
        let mut times: Vec<i64> = self.deliveries.iter().map(|(t, _)| *t).collect();
        times.sort_unstable();
        times.dedup();
        let (longest_gap_ms, gap_from) = times
            .windows(2)
            .filter(|w| w[0] <= stopped_at)
            .map(|w| (w[1].min(stopped_at) - w[0], w[0]))
            .max()
            .unwrap_or((0, 0));
        let first = times.first().copied().unwrap_or(0);
        let lost: Vec<String> = self.missing().into_iter().cloned().collect();
        Tally {
            produced: self.produced.len(),
            delivered: per_message.len(),
            lost: lost.len(),
            lost_examples: lost.into_iter().take(5).collect(),
            duplicated: per_message.values().map(|n| n - 1).sum(),
            unacknowledged_delivered: per_message
                .keys()
                .filter(|m| !self.produced.contains(**m))
                .count(),
            longest_gap_ms,
            longest_gap_after_s: (gap_from - first) / 1000,
            first_delivery_to_stop_s: (stopped_at - first) / 1000,
        }
    }
}

/// One scenario's figures (docs/dataplane.md explains each).
#[derive(Debug, serde::Serialize)]
pub struct Tally {
    /// Messages the source saw acknowledged (written to the pipeline's first buffer).
    pub produced: usize,
    /// Distinct messages the sink recorded.
    pub delivered: usize,
    /// Produced, never delivered.
    pub lost: usize,
    pub lost_examples: Vec<String>,
    /// Deliveries beyond a message's first (Numaflow delivers at least once).
    pub duplicated: usize,
    /// Delivered although the source never saw their acknowledgement (read, written, and the
    /// source's container gone before the acknowledgement reached it).
    pub unacknowledged_delivered: usize,
    /// The longest wait between two deliveries before the sources were stopped: the downtime
    /// a consumer of the sink sees.
    pub longest_gap_ms: i64,
    /// When that gap began, in seconds after the first delivery.
    pub longest_gap_after_s: i64,
    /// From the first delivery to the sources' stop: the window the gap is measured in.
    pub first_delivery_to_stop_s: i64,
}

fn volume(dir: &Path) -> Value {
    json!({"name": "counting", "hostPath": {"path": dir.display().to_string(), "type": "Directory"}})
}

fn mount() -> Value {
    json!([{"name": "counting", "mountPath": "/counting"}])
}

/// A counting source → identity map → recording sink pipeline on ISB service `isb`; `generation`
/// goes into the sink vertex's `containerTemplate.env` (a data-loss change when it changes).
pub fn counting_pipeline(dir: &Path, isb: &str, generation: u32) -> Value {
    json!({
        "interStepBufferServiceName": isb,
        "lifecycle": {"pauseGracePeriodSeconds": 60},
        "vertices": [
            {"name": "in", "scale": {"min": 1, "max": 1}, "volumes": [volume(dir)],
             "source": {"udsource": {"container": {
                 "image": COUNTING_IMAGE, "args": ["source"],
                 "env": [{"name": "RATE", "value": RATE.to_string()}],
                 "volumeMounts": mount()}}}},
            {"name": "cat", "scale": {"min": 1, "max": 1},
             "udf": {"container": {"image": COUNTING_IMAGE, "args": ["map"]}}},
            {"name": "out", "scale": {"min": 1, "max": 1}, "volumes": [volume(dir)],
             "containerTemplate": {"env": [{"name": "GENERATION", "value": generation.to_string()}]},
             "sink": {"udsink": {"container": {
                 "image": COUNTING_IMAGE, "args": ["sink"], "volumeMounts": mount()}}}}
        ],
        "edges": [{"from": "in", "to": "cat"}, {"from": "cat", "to": "out"}]
    })
}

/// The pipeline with a map that exits at once (`args: [crash]`): its pods never run, so the
/// messages its source writes wait in the first buffer.
pub fn with_crashing_map(mut spec: Value) -> Value {
    spec["vertices"][1]["udf"]["container"]["args"] = json!(["crash"]);
    spec
}

/// A MonoVertex of the counting source into the recording sink; `generation` goes into the
/// source container's env (a change that needs a new MonoVertex under progressive).
pub fn counting_monovertex(dir: &Path, generation: u32) -> Value {
    json!({
        "scale": {"min": 1, "max": 1},
        "volumes": [volume(dir)],
        "source": {"udsource": {"container": {
            "image": COUNTING_IMAGE, "args": ["source"],
            "env": [{"name": "RATE", "value": RATE.to_string()},
                    {"name": "GENERATION", "value": generation.to_string()}],
            "volumeMounts": mount()}}},
        "sink": {"udsink": {"container": {
            "image": COUNTING_IMAGE, "args": ["sink"], "volumeMounts": mount()}}}
    })
}

/// The pipeline with a map that takes `ms` milliseconds a message, one at a time: slower than
/// the source, so its buffer holds a backlog. Vertices read 10 messages at a time (Numaflow's
/// default is 500), so that the backlog stays in the buffer instead of in the map's pod.
pub fn with_slow_map(mut spec: Value, ms: u32) -> Value {
    spec["vertices"][1]["udf"]["container"]["env"] =
        json!([{"name": "MAP_DELAY_MS", "value": ms.to_string()}]);
    spec["limits"] = json!({"readBatchSize": 10});
    spec
}

/// The pipeline with its map vertex renamed (a topology change: its buffer is replaced by a
/// new one, and whatever the old one still holds is left behind).
pub fn with_map_renamed(mut spec: Value, name: &str) -> Value {
    spec["vertices"][1]["name"] = json!(name);
    spec["edges"] = json!([{"from": "in", "to": name}, {"from": name, "to": "out"}]);
    spec
}

/// The pipeline with a sink that fails every message (`SINK_FAIL=1`): it reads and never
/// acknowledges.
pub fn with_failing_sink(mut spec: Value) -> Value {
    spec["vertices"][2]["sink"]["udsink"]["container"]["env"] =
        json!([{"name": "SINK_FAIL", "value": "1"}]);
    spec
}

/// The MonoVertex with a sink that fails every message.
pub fn monovertex_with_failing_sink(mut spec: Value) -> Value {
    spec["sink"]["udsink"]["container"]["env"] = json!([{"name": "SINK_FAIL", "value": "1"}]);
    spec
}
