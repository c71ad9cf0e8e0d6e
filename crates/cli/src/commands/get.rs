//! `get`: fetch rollouts and what hangs off them, draw the tree, optionally redraw on change.

use crate::cli::{GetArgs, Output};
use crate::cluster::{Cluster, list_or_empty};
use crate::render::{Style, render};
use crate::tree::{ChildObjects, RolloutObjects, Tree, build};
use anyhow::{Context, Result};
use futures::{FutureExt, StreamExt, stream};
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::runtime::reflector::{self, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use numaplane_api::Kind;
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
    // Watch caches of everything the tree shows: a change costs the API server nothing more
    // than its watch event, and each redraw reads the caches (the dashboard's way).
    let mut caches = Caches::default();
    let mut streams = Vec::new();
    let mut watch = |resource: &ApiResource, config: watcher::Config| {
        let writer = reflector::store::Writer::new(resource.clone());
        let store = writer.as_reader();
        streams.push(
            reflector(writer, watcher(api(cluster, args, resource), config))
                .default_backoff()
                .map(|e| e.map(|_| ()))
                .boxed(),
        );
        store
    };
    for &kind in &kinds {
        let mut config = watcher::Config::default();
        if let Some(name) = &args.name {
            config = config.fields(&format!("metadata.name={name}"));
        }
        let rollouts = watch(&kind.rollout_resource(), config);
        // A NumaflowController written before children carried labels has only its
        // rollout's name.
        let children = if kind == Kind::NumaflowController {
            watcher::Config::default()
        } else {
            watcher::Config::default().labels(labels::PARENT_ROLLOUT_NAME)
        };
        let children = watch(&kind.child_resource(), children);
        caches.kinds.push((kind, rollouts, children));
    }
    if kinds.contains(&Kind::Pipeline) {
        let config = watcher::Config::default().labels(labels::NUMAFLOW_PIPELINE_NAME);
        caches.vertices = Some(watch(&ApiResource::erase::<Vertex>(&()), config));
    }
    let runs = ApiResource::erase::<AnalysisRun>(&());
    if kinds
        .iter()
        .any(|k| matches!(k, Kind::Pipeline | Kind::MonoVertex))
    {
        match installed(cluster, args, &runs).await {
            Ok(true) => caches.runs = Some(watch(&runs, watcher::Config::default())),
            Ok(false) => {}
            // Said as a refused watch would be: it could not be made either.
            Err(kube::Error::Api(e)) if matches!(e.code, 401 | 403) => {
                eprintln!("watch error: {e}");
                return Ok(super::EXIT_ERROR);
            }
            Err(e) => return Err(e.into()),
        }
    }
    let mut events = stream::select_all(streams);
    let mut last: Option<Tree> = None;
    while let Some(event) = events.next().await {
        if let Err(e) = event {
            if refused(&e) {
                return Ok(super::EXIT_ERROR);
            }
            continue;
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
        // Nothing is drawn before every cache holds its first list.
        if !caches.ready() {
            continue;
        }
        let tree = caches.tree()?;
        if last.as_ref() == Some(&tree) {
            continue;
        }
        print(cluster, args, &tree, style, true)?;
        last = Some(tree);
    }
    Ok(super::EXIT_OK)
}

/// The watch caches `get -w` draws from.
#[derive(Default)]
struct Caches {
    /// Per kind: its rollouts and its children.
    kinds: Vec<(Kind, Store<DynamicObject>, Store<DynamicObject>)>,
    /// Vertex objects, when Pipelines are shown.
    vertices: Option<Store<DynamicObject>>,
    /// AnalysisRuns, when Argo Rollouts is installed and Pipelines or MonoVertices are shown.
    runs: Option<Store<DynamicObject>>,
}

impl Caches {
    fn stores(&self) -> impl Iterator<Item = &Store<DynamicObject>> {
        self.kinds
            .iter()
            .flat_map(|(_, r, c)| [r, c])
            .chain(self.vertices.iter())
            .chain(self.runs.iter())
    }

    /// Every cache holds its first list (an empty one included).
    fn ready(&self) -> bool {
        self.stores()
            .all(|s| s.wait_until_ready().now_or_never().is_some())
    }

    /// The tree, from the caches alone, as [`snapshot`] builds it from the API server.
    fn tree(&self) -> Result<Tree> {
        let mut objects = Vec::new();
        for (kind, rollouts, children) in &self.kinds {
            let mut found = rollouts.state();
            by_namespace_and_name(&mut found);
            for rollout in found {
                let (ns, name) = (&rollout.metadata.namespace, &rollout.metadata.name);
                let mut mine: Vec<_> = children
                    .state()
                    .into_iter()
                    .filter(|c| &c.metadata.namespace == ns)
                    .filter(|c| {
                        label(c, labels::PARENT_ROLLOUT_NAME) == name.as_deref()
                            || (*kind == Kind::NumaflowController && &c.metadata.name == name)
                    })
                    .collect();
                mine.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
                let mut out = Vec::new();
                for child in mine {
                    out.push(self.child_objects(*kind, &child)?);
                }
                objects.push(RolloutObjects {
                    kind: *kind,
                    rollout: to_value(&rollout)?,
                    children: out,
                });
            }
        }
        Ok(build(&objects, chrono::Utc::now()))
    }

    fn child_objects(&self, kind: Kind, child: &DynamicObject) -> Result<ChildObjects> {
        let ns = &child.metadata.namespace;
        let name = child.metadata.name.as_deref();
        let uid = child.metadata.uid.clone().unwrap_or_default();
        let vertices = match (&self.vertices, kind) {
            (Some(store), Kind::Pipeline) => {
                let mut v: Vec<_> = store
                    .state()
                    .into_iter()
                    .filter(|v| &v.metadata.namespace == ns)
                    .filter(|v| label(v, labels::NUMAFLOW_PIPELINE_NAME) == name)
                    .collect();
                v.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
                v.iter().map(|v| to_value(v)).collect::<Result<Vec<_>>>()?
            }
            _ => Vec::new(),
        };
        let analysis_runs = match (&self.runs, kind) {
            (Some(store), Kind::Pipeline | Kind::MonoVertex) => {
                let mut r: Vec<_> = store
                    .state()
                    .into_iter()
                    .filter(|r| &r.metadata.namespace == ns)
                    .filter(|r| owned_by(r, &uid))
                    .collect();
                r.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
                r.iter().map(|r| to_value(r)).collect::<Result<Vec<_>>>()?
            }
            _ => Vec::new(),
        };
        Ok(ChildObjects {
            object: to_value(child)?,
            vertices,
            analysis_runs,
        })
    }
}

/// Rollouts in the order the tree shows them.
fn by_namespace_and_name<T: std::borrow::Borrow<DynamicObject>>(objects: &mut [T]) {
    let key = |o: &T| {
        let m = &o.borrow().metadata;
        (m.namespace.clone(), m.name.clone())
    };
    objects.sort_by_key(key);
}

/// Whether `o` has an owner reference to uid `uid` (an AnalysisRun of a child).
fn owned_by(o: &DynamicObject, uid: &str) -> bool {
    !uid.is_empty()
        && o.metadata
            .owner_references
            .iter()
            .flatten()
            .any(|r| r.uid == uid)
}

fn label<'a>(o: &'a DynamicObject, key: &str) -> Option<&'a str> {
    o.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
}

/// Whether a resource type is served (Argo Rollouts' AnalysisRun may not be installed).
async fn installed(
    cluster: &Cluster,
    args: &GetArgs,
    resource: &ApiResource,
) -> Result<bool, kube::Error> {
    match api(cluster, args, resource)
        .list(&ListParams::default().limit(1))
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
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

fn kinds_of(args: &GetArgs) -> Vec<Kind> {
    match args.kind {
        Some(k) => vec![k],
        None => Kind::ALL.to_vec(),
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
                    (Some(n), Some(k)) => format!("No {} named {n:?}", k.rollout_kind()),
                    (Some(n), None) => format!("No rollout named {n:?}"),
                    (None, Some(k)) => format!("No {}s", k.rollout_kind()),
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
async fn snapshot(cluster: &Cluster, args: &GetArgs, kinds: &[Kind]) -> Result<Tree> {
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
        .with_context(|| format!("listing {}s", kind.rollout_kind()))?;
        by_namespace_and_name(&mut found);
        for rollout in found {
            let children = children(cluster, kind, &rollout).await.with_context(|| {
                format!(
                    "listing the children of {} {}",
                    kind.rollout_kind(),
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
    kind: Kind,
    rollout: &DynamicObject,
) -> Result<Vec<ChildObjects>> {
    let ns = rollout.metadata.namespace.clone().unwrap_or_default();
    let name = rollout.metadata.name.clone().unwrap_or_default();
    let client = cluster.client.clone();
    let child_api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &kind.child_resource());
    let params = ListParams::default().labels(&format!("{}={name}", labels::PARENT_ROLLOUT_NAME));
    let mut children = list_or_empty(&child_api, &params).await?;
    // A NumaflowController written before children carried labels has its rollout's name.
    if kind == Kind::NumaflowController
        && !children
            .iter()
            .any(|c| c.metadata.name.as_deref() == Some(&name))
        && let Some(own) = child_api.get_opt(&name).await?
    {
        children.push(own);
    }
    children.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    if children.is_empty() {
        return Ok(Vec::new());
    }
    let runs_api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &ApiResource::erase::<AnalysisRun>(&()));
    let runs = if matches!(kind, Kind::Pipeline | Kind::MonoVertex) {
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
        let vertices = if kind == Kind::Pipeline {
            let params = ListParams::default()
                .labels(&format!("{}={child_name}", labels::NUMAFLOW_PIPELINE_NAME));
            list_or_empty(&vertex_api, &params).await?
        } else {
            Vec::new()
        };
        let analysis_runs = runs
            .iter()
            .filter(|r| owned_by(r, &uid))
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
