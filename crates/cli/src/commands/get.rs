//! `get`: fetch rollouts and what hangs off them, draw the tree, optionally redraw on change.

use crate::cli::{GetArgs, Output};
use crate::cluster::{Cluster, list_or_empty};
use crate::kinds::RolloutKind;
use crate::render::{Style, render};
use crate::tree::{ChildObjects, RolloutObjects, Tree, build};
use anyhow::{Context, Result};
use futures::{StreamExt, stream};
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::runtime::{WatchStreamExt, watcher};
use numaplane_api::keys::labels;
use numaplane_api::numaflow::{AnalysisRun, Vertex};
use serde_json::Value;
use std::io::Write;

pub async fn run(cluster: &Cluster, args: &GetArgs) -> Result<i32> {
    let style = Style::detect();
    let kinds = kinds_of(args);
    if !args.watch {
        let tree = snapshot(cluster, args, &kinds).await?;
        print(cluster, args, &tree, style, false)?;
        return Ok(super::EXIT_OK);
    }
    // Any change to a rollout or to a child (of these kinds) triggers a redraw.
    let mut streams = Vec::new();
    for kind in &kinds {
        let mut config = watcher::Config::default();
        if let Some(name) = &args.name {
            config = config.fields(&format!("metadata.name={name}"));
        }
        streams.push(
            watcher(api(cluster, args, &kind.rollout_resource()), config)
                .default_backoff()
                .boxed(),
        );
        let children = watcher::Config::default().labels(labels::PARENT_ROLLOUT_NAME);
        streams.push(
            watcher(api(cluster, args, &kind.child_resource()), children)
                .default_backoff()
                .boxed(),
        );
    }
    let mut events = stream::select_all(streams);
    let mut last: Option<Tree> = None;
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::InitApply(_) | watcher::Event::Init) => continue,
            Ok(_) => {}
            Err(e) => {
                if refused(&e) {
                    return Ok(super::EXIT_ERROR);
                }
                continue;
            }
        }
        // A burst of changes (a rollout step writes several objects) is drawn once.
        let settle = tokio::time::sleep(DEBOUNCE);
        tokio::pin!(settle);
        loop {
            tokio::select! {
                () = &mut settle => break,
                more = events.next() => match more {
                    Some(Err(e)) if refused(&e) => return Ok(super::EXIT_ERROR),
                    Some(_) => {}
                    None => break,
                },
            }
        }
        let tree = snapshot(cluster, args, &kinds).await?;
        if last.as_ref() == Some(&tree) {
            continue;
        }
        print(cluster, args, &tree, style, true)?;
        last = Some(tree);
    }
    Ok(super::EXIT_OK)
}

/// How long `get -w` waits for more changes before it draws.
const DEBOUNCE: std::time::Duration = std::time::Duration::from_millis(250);

/// Says a watch error (not swallowed: a watch that may not be made never shows anything), and
/// whether the API server refuses the watch for good (not allowed): retrying cannot help.
pub(crate) fn refused(e: &watcher::Error) -> bool {
    eprintln!("watch error: {e}");
    let code = match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.code,
        watcher::Error::WatchError(s) => s.code,
        _ => 0,
    };
    matches!(code, 401 | 403)
}

fn kinds_of(args: &GetArgs) -> Vec<RolloutKind> {
    match args.kind {
        Some(k) => vec![k],
        None => RolloutKind::ALL.to_vec(),
    }
}

fn api(cluster: &Cluster, args: &GetArgs, resource: &ApiResource) -> Api<DynamicObject> {
    if args.all_namespaces {
        Api::all_with(cluster.client.clone(), resource)
    } else {
        Api::namespaced_with(cluster.client.clone(), &cluster.namespace, resource)
    }
}

fn print(cluster: &Cluster, args: &GetArgs, tree: &Tree, style: Style, redraw: bool) -> Result<()> {
    let mut out = std::io::stdout().lock();
    let text = match args.output {
        Output::Json => format!("{}\n", serde_json::to_string_pretty(tree)?),
        Output::Yaml => {
            let yaml = serde_saphyr::to_string(tree).context("rendering yaml")?;
            if redraw { format!("---\n{yaml}") } else { yaml }
        }
        Output::Tree => {
            if tree.rollouts.is_empty() {
                let place = if args.all_namespaces {
                    "any namespace".to_string()
                } else {
                    format!("namespace {}", cluster.namespace)
                };
                let what = match (&args.name, args.kind) {
                    (Some(n), Some(k)) => format!("No {} named {n:?}", k.kind()),
                    (Some(n), None) => format!("No rollout named {n:?}"),
                    (None, Some(k)) => format!("No {}s", k.kind()),
                    (None, None) => "No rollouts".to_string(),
                };
                format!("{what} in {place}.\n")
            } else {
                render(tree, style, args.all_namespaces)
            }
        }
    };
    if redraw && args.output == Output::Tree {
        if style.color {
            // A terminal: clear it and draw from the top.
            write!(out, "\x1b[2J\x1b[H")?;
        } else {
            writeln!(out, "---")?;
        }
    }
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

fn to_value(obj: &DynamicObject) -> Result<Value> {
    Ok(serde_json::to_value(obj)?)
}

/// Everything the tree needs, fetched now.
async fn snapshot(cluster: &Cluster, args: &GetArgs, kinds: &[RolloutKind]) -> Result<Tree> {
    let mut objects = Vec::new();
    for &kind in kinds {
        let rollouts = api(cluster, args, &kind.rollout_resource());
        let mut found = match &args.name {
            Some(name) => {
                let params = ListParams::default().fields(&format!("metadata.name={name}"));
                list_or_empty(&rollouts, &params).await
            }
            None => list_or_empty(&rollouts, &ListParams::default()).await,
        }
        .with_context(|| format!("listing {}s", kind.kind()))?;
        found.sort_by(|a, b| {
            (&a.metadata.namespace, &a.metadata.name)
                .cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        for rollout in found {
            let children = children(cluster, kind, &rollout).await.with_context(|| {
                format!(
                    "listing the children of {} {}",
                    kind.kind(),
                    rollout.metadata.name.as_deref().unwrap_or_default()
                )
            })?;
            objects.push(RolloutObjects {
                kind,
                rollout: to_value(&rollout)?,
                children,
            });
        }
    }
    Ok(build(&objects, chrono::Utc::now()))
}

pub(crate) async fn children(
    cluster: &Cluster,
    kind: RolloutKind,
    rollout: &DynamicObject,
) -> Result<Vec<ChildObjects>> {
    let ns = rollout.metadata.namespace.clone().unwrap_or_default();
    let name = rollout.metadata.name.clone().unwrap_or_default();
    let client = cluster.client.clone();
    let child_api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &kind.child_resource());
    let mut children = if kind == RolloutKind::NumaflowController {
        // The NumaflowController has the rollout's name and no parent label.
        child_api.get_opt(&name).await?.into_iter().collect()
    } else {
        let params =
            ListParams::default().labels(&format!("{}={name}", labels::PARENT_ROLLOUT_NAME));
        list_or_empty(&child_api, &params).await?
    };
    children.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    if children.is_empty() {
        return Ok(Vec::new());
    }
    let runs_api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &ApiResource::erase::<AnalysisRun>(&()));
    let runs = if matches!(kind, RolloutKind::Pipeline | RolloutKind::MonoVertex) {
        list_or_empty(&runs_api, &ListParams::default()).await?
    } else {
        Vec::new()
    };
    let vertex_api: Api<DynamicObject> =
        Api::namespaced_with(client, &ns, &ApiResource::erase::<Vertex>(&()));
    let mut out = Vec::new();
    for child in children {
        let child_name = child.metadata.name.clone().unwrap_or_default();
        let uid = child.metadata.uid.clone().unwrap_or_default();
        let vertices = if kind == RolloutKind::Pipeline {
            let params = ListParams::default()
                .labels(&format!("{}={child_name}", labels::NUMAFLOW_PIPELINE_NAME));
            list_or_empty(&vertex_api, &params).await?
        } else {
            Vec::new()
        };
        let analysis_runs = runs
            .iter()
            .filter(|r| {
                r.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| !uid.is_empty() && o.uid == uid)
            })
            .map(to_value)
            .collect::<Result<Vec<_>>>()?;
        out.push(ChildObjects {
            object: to_value(&child)?,
            vertices: vertices.iter().map(to_value).collect::<Result<Vec<_>>>()?,
            analysis_runs,
        });
    }
    Ok(out)
}
