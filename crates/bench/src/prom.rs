//! Reading the controller's Prometheus exposition: counters and the reconcile-duration histogram,
//! and quantiles estimated from histogram buckets the way PromQL's `histogram_quantile` does
//! (linear interpolation inside the bucket holding the rank).

use std::collections::BTreeMap;

/// One sample line: metric name, labels, value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Parses the sample lines of a text exposition (comments and malformed lines are skipped).
pub fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(parse_line)
        .collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let (series, value) = line.trim().rsplit_once(' ')?;
    let value = value.parse().ok()?;
    let (name, labels) = match series.split_once('{') {
        Some((name, rest)) => (name, parse_labels(rest.strip_suffix('}')?)?),
        None => (series, BTreeMap::new()),
    };
    Some(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// `a="x",b="y"`; our label values never contain `",`, so a plain split is enough.
fn parse_labels(s: &str) -> Option<BTreeMap<String, String>> {
    s.split("\",")
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once("=\"")?;
            Some((k.to_string(), v.trim_end_matches('"').to_string()))
        })
        .collect()
}

/// Sum of every series of `name` (all label combinations).
pub fn sum(samples: &[Sample], name: &str) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name)
        .map(|s| s.value)
        .sum()
}

/// Cumulative bucket counts by upper bound, summed over every series of histogram `name`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Buckets(pub Vec<(f64, f64)>);

impl Buckets {
    pub fn of(samples: &[Sample], name: &str) -> Self {
        let bucket = format!("{name}_bucket");
        let mut by_le: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
        for s in samples.iter().filter(|s| s.name == bucket) {
            let Some(le) = s.labels.get("le").and_then(|v| parse_le(v)) else {
                continue;
            };
            // Keyed by the bit pattern of a non-negative float, which sorts like the float.
            by_le.entry(le.to_bits()).or_insert((le, 0.0)).1 += s.value;
        }
        Buckets(by_le.into_values().collect())
    }

    /// Observations in the `+Inf` bucket (all of them).
    pub fn count(&self) -> f64 {
        self.0.last().map_or(0.0, |(_, c)| *c)
    }

    /// What was observed between `earlier` and `self` (same bucket layout).
    pub fn since(&self, earlier: &Buckets) -> Buckets {
        Buckets(
            self.0
                .iter()
                .map(|(le, c)| {
                    let before = earlier
                        .0
                        .iter()
                        .find(|(l, _)| l == le)
                        .map_or(0.0, |(_, c)| *c);
                    (*le, (c - before).max(0.0))
                })
                .collect(),
        )
    }

    /// The `q` quantile (0..=1); `None` without observations. Like `histogram_quantile`, a rank
    /// in the `+Inf` bucket yields the largest finite bound.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total <= 0.0 {
            return None;
        }
        let rank = q * total;
        let mut prev_le = 0.0;
        let mut prev_count = 0.0;
        for (le, count) in &self.0 {
            if *count >= rank {
                if le.is_infinite() {
                    return Some(prev_le);
                }
                let in_bucket = count - prev_count;
                if in_bucket <= 0.0 {
                    return Some(*le);
                }
                return Some(prev_le + (le - prev_le) * (rank - prev_count) / in_bucket);
            }
            prev_le = *le;
            prev_count = *count;
        }
        Some(prev_le)
    }
}

fn parse_le(v: &str) -> Option<f64> {
    match v {
        "+Inf" => Some(f64::INFINITY),
        v => v.parse().ok().filter(|f: &f64| *f >= 0.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP numaplane_reconcile_duration_seconds Duration of every reconcile pass.
# TYPE numaplane_reconcile_duration_seconds histogram
numaplane_reconcile_duration_seconds_sum{controller="pipeline-rollout-controller",intuit_alert="true"} 1.5
numaplane_reconcile_duration_seconds_count{controller="pipeline-rollout-controller",intuit_alert="true"} 10
numaplane_reconcile_duration_seconds_bucket{le="0.01",controller="pipeline-rollout-controller",intuit_alert="true"} 2
numaplane_reconcile_duration_seconds_bucket{le="0.1",controller="pipeline-rollout-controller",intuit_alert="true"} 8
numaplane_reconcile_duration_seconds_bucket{le="+Inf",controller="pipeline-rollout-controller",intuit_alert="true"} 10
numaplane_reconcile_duration_seconds_bucket{le="0.01",controller="isbsvc-rollout-controller",intuit_alert="true"} 0
numaplane_reconcile_duration_seconds_bucket{le="0.1",controller="isbsvc-rollout-controller",intuit_alert="true"} 0
numaplane_reconcile_duration_seconds_bucket{le="+Inf",controller="isbsvc-rollout-controller",intuit_alert="true"} 10
pipeline_rollout_syncs_total{intuit_alert="true"} 12
numaplane_kube_requests_total{verb="get",resource="pipelines",code="200"} 3
numaplane_kube_requests_total{verb="patch",resource="pipelines",code="200"} 4
"#;

    #[test]
    fn parses_names_labels_and_values() {
        let s = parse(TEXT);
        assert_eq!(sum(&s, "pipeline_rollout_syncs_total"), 12.0);
        assert_eq!(sum(&s, "numaplane_kube_requests_total"), 7.0);
        let get = s
            .iter()
            .find(|x| x.labels.get("verb").map(String::as_str) == Some("get"))
            .expect("get sample");
        assert_eq!(get.labels["resource"], "pipelines");
        assert_eq!(get.labels["code"], "200");
    }

    #[test]
    fn buckets_sum_over_series_in_bound_order() {
        let b = Buckets::of(&parse(TEXT), "numaplane_reconcile_duration_seconds");
        assert_eq!(b.0, vec![(0.01, 2.0), (0.1, 8.0), (f64::INFINITY, 20.0)]);
        assert_eq!(b.count(), 20.0);
    }

    #[test]
    fn quantiles_interpolate_within_the_bucket() {
        let b = Buckets(vec![
            (0.01, 2.0),
            (0.1, 8.0),
            (1.0, 10.0),
            (f64::INFINITY, 10.0),
        ]);
        // Rank 5 of 10 lies 3/6 into (0.01, 0.1].
        let p50 = b.quantile(0.5).expect("p50");
        assert!((p50 - 0.055).abs() < 1e-9, "{p50}");
        // Rank 1 of 10 lies half-way into (0, 0.01].
        let p10 = b.quantile(0.1).expect("p10");
        assert!((p10 - 0.005).abs() < 1e-9, "{p10}");
        // Rank 9.9 lies 0.95 into (0.1, 1].
        let p99 = b.quantile(0.99).expect("p99");
        assert!((p99 - 0.955).abs() < 1e-9, "{p99}");
    }

    #[test]
    fn quantile_in_the_inf_bucket_is_the_largest_finite_bound() {
        let b = Buckets(vec![(0.1, 1.0), (10.0, 1.0), (f64::INFINITY, 10.0)]);
        assert_eq!(b.quantile(0.99), Some(10.0));
        assert_eq!(Buckets::default().quantile(0.5), None);
    }

    #[test]
    fn since_subtracts_an_earlier_scrape() {
        let before = Buckets(vec![(0.1, 5.0), (f64::INFINITY, 6.0)]);
        let after = Buckets(vec![(0.1, 7.0), (f64::INFINITY, 10.0)]);
        let d = after.since(&before);
        assert_eq!(d.0, vec![(0.1, 2.0), (f64::INFINITY, 4.0)]);
        assert_eq!(d.quantile(0.5), Some(0.1));
    }
}
