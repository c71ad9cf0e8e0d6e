//! `history`: the upgrade attempts a rollout keeps in `status.upgradeHistory`, oldest first.

use crate::cli::{HistoryArgs, HistoryOutput};
use crate::cluster::Cluster;
use crate::tree::human_duration;
use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use numaplane_api::Kind;
use numaplane_api::common::UpgradeRecord;
use serde::Serialize;

/// What `-o json|yaml` prints.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct History<'a> {
    kind: &'static str,
    namespace: &'a str,
    name: &'a str,
    upgrade_history: &'a [UpgradeRecord],
}

pub async fn run(cluster: &Cluster, args: &HistoryArgs) -> Result<i32> {
    let (kind, obj) = cluster.find(&args.rollout, &Kind::ALL, args.kind).await?;
    let records = records(obj.data.pointer("/status/upgradeHistory"))?;
    let history = History {
        kind: kind.rollout_kind(),
        namespace: &cluster.namespace,
        name: &args.rollout,
        upgrade_history: &records,
    };
    let text = match args.output {
        HistoryOutput::Json => format!("{}\n", serde_json::to_string_pretty(&history)?),
        HistoryOutput::Yaml => serde_saphyr::to_string(&history).context("rendering yaml")?,
        HistoryOutput::Table => render(&history, Utc::now()),
    };
    print!("{text}");
    Ok(super::EXIT_OK)
}

/// The records of a status, or none when it has no history yet.
fn records(v: Option<&serde_json::Value>) -> Result<Vec<UpgradeRecord>> {
    match v {
        None | Some(serde_json::Value::Null) => Ok(Vec::new()),
        Some(v) => serde_json::from_value(v.clone()).context("reading status.upgradeHistory"),
    }
}

/// A numbered table, oldest first, with each attempt's details indented below it.
fn render(h: &History<'_>, now: DateTime<Utc>) -> String {
    let mut out = format!("{} {}/{}", h.kind, h.namespace, h.name);
    if h.upgrade_history.is_empty() {
        out.push_str(": no upgrade recorded yet\n");
        return out;
    }
    out.push_str(&format!(
        ": {} upgrade attempt{} (oldest first)\n",
        h.upgrade_history.len(),
        if h.upgrade_history.len() == 1 {
            ""
        } else {
            "s"
        }
    ));
    let rows: Vec<[String; 6]> = h
        .upgrade_history
        .iter()
        .enumerate()
        .map(|(i, r)| row(i + 1, r, now))
        .collect();
    let header = ["#", "CHILD", "STRATEGY", "STARTED", "DURATION", "OUTCOME"].map(String::from);
    let mut widths = header.clone().map(|c| c.chars().count());
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: &[String; 6]| {
        let mut l = String::new();
        for (i, (c, w)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                l.push_str(c);
            } else {
                l.push_str(&format!("{c:<w$}  "));
            }
        }
        l.trim_end().to_string() + "\n"
    };
    out.push_str(&line(&header));
    for (r, cells) in h.upgrade_history.iter().zip(&rows) {
        out.push_str(&line(cells));
        let indent = " ".repeat(widths[0] + 2);
        if !r.previous_child.is_empty() {
            out.push_str(&format!("{indent}from {}\n", r.previous_child));
        }
        if !r.changed_fields.is_empty() {
            out.push_str(&format!(
                "{indent}changed: {}\n",
                r.changed_fields.join(", ")
            ));
        }
        for reason in &r.reasons {
            out.push_str(&format!("{indent}reason: {reason}\n"));
        }
    }
    out
}

fn row(n: usize, r: &UpgradeRecord, now: DateTime<Utc>) -> [String; 6] {
    let ts = |t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time| t.0.as_second();
    let start = ts(&r.start_time);
    let (duration, outcome) = match (&r.outcome, &r.end_time) {
        (Some(o), end) => (
            human_duration(end.as_ref().map_or(0, |e| (ts(e) - start).max(0))),
            format!("{o:?}"),
        ),
        (None, _) => (
            human_duration((now.timestamp() - start).max(0)),
            "in progress".to_string(),
        ),
    };
    let strategy = serde_json::to_value(r.strategy)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let started = DateTime::<Utc>::from_timestamp(start, 0)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default();
    [
        n.to_string(),
        r.child.clone(),
        strategy,
        started,
        duration,
        outcome,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn renders_attempts_oldest_first_with_their_details() {
        let records = records(Some(&json!([
            {"child": "p-0", "strategy": "DirectApply", "startTime": "2026-12-03T10:00:00Z",
             "endTime": "2026-12-03T10:00:00Z", "outcome": "Created", "generation": 1},
            {"child": "p-1", "previousChild": "p-0", "strategy": "Progressive",
             "startTime": "2026-12-03T10:05:00Z", "endTime": "2026-12-03T10:07:30Z",
             "outcome": "Failed", "reasons": ["vertex cat: not healthy"],
             "changedFields": ["spec.pipeline.spec.vertices[1].udf.container.image"]},
            {"child": "p-2", "previousChild": "p-0", "strategy": "Progressive",
             "startTime": "2026-12-03T10:10:00Z"}
        ])))
        .unwrap();
        let h = History {
            kind: "PipelineRollout",
            namespace: "demo",
            name: "p",
            upgrade_history: &records,
        };
        let now = DateTime::parse_from_rfc3339("2026-12-03T10:10:45Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(
            render(&h, now),
            "PipelineRollout demo/p: 3 upgrade attempts (oldest first)
#  CHILD  STRATEGY     STARTED               DURATION  OUTCOME
1  p-0    DirectApply  2026-12-03T10:00:00Z  0s        Created
2  p-1    Progressive  2026-12-03T10:05:00Z  2m30s     Failed
   from p-0
   changed: spec.pipeline.spec.vertices[1].udf.container.image
   reason: vertex cat: not healthy
3  p-2    Progressive  2026-12-03T10:10:00Z  45s       in progress
   from p-0
"
        );
    }

    #[test]
    fn a_rollout_without_history_says_so_and_a_malformed_one_is_an_error() {
        let h = History {
            kind: "MonoVertexRollout",
            namespace: "ns",
            name: "m",
            upgrade_history: &[],
        };
        assert_eq!(
            render(&h, Utc::now()),
            "MonoVertexRollout ns/m: no upgrade recorded yet\n"
        );
        assert!(records(None).unwrap().is_empty());
        let err = records(Some(&json!({"child": 3}))).unwrap_err();
        assert!(err.to_string().contains("status.upgradeHistory"), "{err}");
    }
}
