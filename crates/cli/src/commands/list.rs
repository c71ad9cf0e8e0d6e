//! `list`: one line per rollout, read from the rollouts alone (no child is listed): kind, name,
//! phase, the upgrade in progress, the trial, health, age and the status message. `-w` then
//! prints a line for each rollout that changes, from one watch per kind.

use crate::cli::ListArgs;
use crate::cluster::{Cluster, list_or_empty};
use crate::tree::{RolloutObjects, build};
use anyhow::{Context, Result};
use futures::{StreamExt, stream};
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::runtime::{WatchStreamExt, watcher};
use numaplane_api::Kind;
use std::collections::HashMap;
use std::io::Write;

/// The columns, in order; NAMESPACE only with `-A`.
const HEADERS: [&str; 9] = [
    "NAMESPACE",
    "KIND",
    "NAME",
    "PHASE",
    "UPGRADE",
    "TRIAL",
    "HEALTH",
    "AGE",
    "MESSAGE",
];

/// The widest a message is shown (the full one is in `get`).
const MESSAGE_WIDTH: usize = 80;

pub async fn run(cluster: &Cluster, args: &ListArgs) -> Result<i32> {
    let kinds = match args.kind {
        Some(k) => vec![k],
        None => Kind::ALL.to_vec(),
    };
    let mut rows = Vec::new();
    for &kind in &kinds {
        let found = list_or_empty(
            &api(cluster, args, &kind.rollout_resource()),
            &ListParams::default(),
        )
        .await
        .with_context(|| format!("listing {}s", kind.rollout_kind()))?;
        for r in &found {
            rows.push(row(kind, r)?);
        }
    }
    rows.sort();
    let mut out = std::io::stdout().lock();
    if rows.is_empty() && !args.watch {
        let place = if args.all_namespaces {
            "any namespace".to_string()
        } else {
            format!("namespace {}", cluster.namespace)
        };
        writeln!(out, "No rollouts in {place}.")?;
        return Ok(super::EXIT_OK);
    }
    let widths = widths(&rows, args.all_namespaces);
    writeln!(
        out,
        "{}",
        line(&HEADERS.map(str::to_string), &widths, args.all_namespaces)
    )?;
    let mut last: HashMap<(String, String, String), [String; 9]> = HashMap::new();
    for r in rows {
        writeln!(out, "{}", line(&r, &widths, args.all_namespaces))?;
        last.insert(key(&r), r);
    }
    out.flush()?;
    drop(out);
    if !args.watch {
        return Ok(super::EXIT_OK);
    }
    let streams = kinds.iter().map(|&kind| {
        watcher(
            api(cluster, args, &kind.rollout_resource()),
            watcher::Config::default(),
        )
        .default_backoff()
        .map(move |e| (kind, e))
        .boxed()
    });
    let mut events = stream::select_all(streams);
    while let Some((kind, event)) = events.next().await {
        let changed = match event {
            Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => row(kind, &o)?,
            Ok(watcher::Event::Delete(o)) => {
                let mut r = row(kind, &o)?;
                r[3] = "Deleted".into();
                r
            }
            Ok(watcher::Event::Init | watcher::Event::InitDone) => continue,
            Err(e) => {
                if super::get::refused(&e) {
                    return Ok(super::EXIT_ERROR);
                }
                continue;
            }
        };
        // Only what a reader would see change (the age ticks on its own).
        let same = last.get(&key(&changed)).is_some_and(|r| {
            r.iter()
                .zip(&changed)
                .enumerate()
                .all(|(i, (a, b))| i == 7 || a == b)
        });
        if same {
            continue;
        }
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", line(&changed, &widths, args.all_namespaces))?;
        out.flush()?;
        last.insert(key(&changed), changed);
    }
    Ok(super::EXIT_OK)
}

fn api(cluster: &Cluster, args: &ListArgs, resource: &ApiResource) -> Api<DynamicObject> {
    if args.all_namespaces {
        Api::all_with(cluster.client.clone(), resource)
    } else {
        Api::namespaced_with(cluster.client.clone(), &cluster.namespace, resource)
    }
}

fn key(r: &[String; 9]) -> (String, String, String) {
    (r[0].clone(), r[1].clone(), r[2].clone())
}

/// One rollout's line, from the same reading of its status as `get`'s tree.
fn row(kind: Kind, rollout: &DynamicObject) -> Result<[String; 9]> {
    let objects = [RolloutObjects {
        kind,
        rollout: serde_json::to_value(rollout)?,
        children: Vec::new(),
    }];
    let tree = build(&objects, chrono::Utc::now());
    let Some(n) = tree.rollouts.into_iter().next() else {
        anyhow::bail!("{} could not be read", kind.rollout_kind());
    };
    let or_dash = |s: String| if s.is_empty() { "-".to_string() } else { s };
    let trial = n
        .trial
        .map(|t| match t.assessment_result.as_str() {
            "" => t.name,
            result => format!("{} ({result})", t.name),
        })
        .unwrap_or_default();
    let health = n
        .summary
        .iter()
        .find(|s| matches!(s.as_str(), "Healthy" | "Unhealthy" | "HealthUnknown"))
        .cloned()
        .unwrap_or_default();
    let mut message: String = n.message.chars().take(MESSAGE_WIDTH).collect();
    if n.message.chars().count() > MESSAGE_WIDTH {
        message.push('…');
    }
    Ok([
        n.namespace,
        n.kind,
        n.name,
        or_dash(n.phase),
        or_dash(n.upgrade_in_progress.unwrap_or_default()),
        or_dash(trial),
        or_dash(health),
        or_dash(n.age.unwrap_or_default()),
        message,
    ])
}

fn widths(rows: &[[String; 9]], with_namespace: bool) -> [usize; 9] {
    let mut w = HEADERS.map(str::len);
    for r in rows {
        for (i, cell) in r.iter().enumerate() {
            w[i] = w[i].max(cell.chars().count());
        }
    }
    if !with_namespace {
        w[0] = 0;
    }
    w
}

fn line(r: &[String; 9], widths: &[usize; 9], with_namespace: bool) -> String {
    let mut out = String::new();
    for (i, cell) in r.iter().enumerate() {
        if i == 0 && !with_namespace {
            continue;
        }
        if i == r.len() - 1 {
            out.push_str(cell);
        } else {
            out.push_str(&format!("{cell:<w$}   ", w = widths[i]));
        }
    }
    out.trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(cells: [&str; 9]) -> [String; 9] {
        cells.map(str::to_string)
    }

    #[test]
    fn columns_line_up_and_the_namespace_shows_only_with_all_namespaces() {
        let rows = [
            r([
                "ns",
                "PipelineRollout",
                "my-pipeline",
                "Deployed",
                "-",
                "-",
                "Healthy",
                "3m",
                "",
            ]),
            r([
                "ns",
                "MonoVertexRollout",
                "m",
                "Pending",
                "Progressive",
                "m-1 (Unknown)",
                "Healthy",
                "10s",
                "Progressing",
            ]),
        ];
        let w = widths(&rows, false);
        assert_eq!(
            line(&rows[0], &w, false),
            "PipelineRollout     my-pipeline   Deployed   -             -               Healthy   3m"
        );
        assert_eq!(
            line(&rows[1], &w, false),
            "MonoVertexRollout   m             Pending    Progressive   m-1 (Unknown)   Healthy   10s   Progressing"
        );
        let w = widths(&rows, true);
        assert!(line(&rows[0], &w, true).starts_with("ns          PipelineRollout"));
    }
}
