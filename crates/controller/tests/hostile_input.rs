//! Hostile input (issue "Reliability…", item 4): rollout specs generated from the reference
//! samples and from random valid specs, then mutated with knowledge of their structure (wrong
//! types, missing and extra fields, huge values, unicode, deep nesting, template tags in odd
//! places, riders of every kind, names at the length limits), sent through the real API server
//! to a Numaplane operator process running under the shipped ClusterRole.
//!
//! Every case the API server accepts must be answered: its generation observed, and phase
//! Deployed, or Failed with a message naming the field, or Pending saying what it waits for. The
//! operator must never panic nor exit, a sentinel rollout changed every ten cases must keep
//! converging, every case must go away when deleted, and the namespace's upgrade invariants
//! must hold throughout.
//!
//! `HOSTILE_CASES` (default 60, the slice `make test` runs) and `HOSTILE_SEED` choose the run;
//! `make fuzz` runs 10,000. Every case draws from its own seeded stream, so a failure names the
//! case and `HOSTILE_FROM=<case> HOSTILE_CASES=1` replays it (`HOSTILE_VERBOSE=1` prints every
//! case's mutations). `HOSTILE_RESULTS=<file>` writes the figures as JSON. Cases run in a
//! sliding window (`HOSTILE_WINDOW`, default 20, wait for their answer at once): an answered
//! case is deleted and watched until it is gone while the next ones are sent.

mod support;

use futures::future::join_all;
use futures::{StreamExt, stream};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use numaplane_api::numaflow::Pipeline;
use numaplane_testenv::TestEnv;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use support::{Process, eventually, install_numaflow, install_rbac, repo};

const DEFAULT_CASES: usize = 60;
const DEFAULT_SEED: u64 = 20261202;
/// How many cases wait for their answer at once.
const DEFAULT_WINDOW: usize = 20;
/// How long the operator has to answer a case (with up to the window's number beside it).
const ANSWER_BOUND: Duration = Duration::from_secs(90);

/// Most generated pipelines never run (bad specs Numaflow fails): a deleted case waits at most
/// 20 s for them to drain, not the default 300 s.
const CONFIG: &str = r#"
defaultUpgradeStrategy: "no-strategy"
permittedRiders: "group=autoscaling.k8s.io,kind=VerticalPodAutoscaler;group=,kind=ConfigMap;group=autoscaling,kind=HorizontalPodAutoscaler;group=policy,kind=PodDisruptionBudget"
pipeline:
  deletionDrainTimeoutSeconds: 20
"#;

/// splitmix64: a seeded generator, so a failing case is replayed from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// The first document of a sample under `config/samples`, without its namespace.
fn sample(file: &str) -> Value {
    let text = std::fs::read_to_string(repo(&format!("config/samples/{file}"))).expect("sample");
    let doc = text.split("\n---").next().expect("first document");
    let mut v: Value = serde_saphyr::from_str(doc).expect("parse sample");
    v["metadata"]
        .as_object_mut()
        .expect("metadata")
        .remove("namespace");
    v
}

const ISB: &str = "my-isbsvc";

/// A random valid PipelineRollout: a chain of 2 to 5 vertices on the namespace's ISB service.
fn valid_pipeline(rng: &mut Rng) -> Value {
    let n = 2 + rng.below(4);
    let vertices: Vec<Value> = (0..n)
        .map(|i| {
            let min = rng.below(3) as i64;
            let scale = json!({"min": min, "max": min + rng.below(3) as i64});
            if i == 0 {
                json!({"name": "in", "scale": scale,
                       "source": {"generator": {"rpu": 1 + rng.below(500), "duration": "1s"}}})
            } else if i == n - 1 {
                json!({"name": "out", "scale": scale, "sink": {"log": {}}})
            } else {
                json!({"name": format!("cat{i}"), "scale": scale,
                       "udf": {"container": {"image": "quay.io/numaio/numaflow-go/map-cat:stable"}}})
            }
        })
        .collect();
    let names: Vec<String> = vertices
        .iter()
        .map(|v| v["name"].as_str().unwrap_or_default().to_string())
        .collect();
    let edges: Vec<Value> = names
        .windows(2)
        .map(|w| json!({"from": w[0], "to": w[1]}))
        .collect();
    json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "PipelineRollout",
        "metadata": {"name": "x"},
        "spec": {"pipeline": {"spec": {
            "interStepBufferServiceName": ISB,
            "lifecycle": {"pauseGracePeriodSeconds": rng.below(30)},
            "vertices": vertices,
            "edges": edges
        }}}
    })
}

/// A random valid MonoVertexRollout.
fn valid_monovertex(rng: &mut Rng) -> Value {
    let min = rng.below(3) as i64;
    json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "MonoVertexRollout",
        "metadata": {"name": "x"},
        "spec": {"monoVertex": {"spec": {
            "scale": {"min": min, "max": min + 1 + rng.below(3) as i64},
            "source": {"udsource": {"container": {"image": "quay.io/numaio/numaflow-go/source-simple-source:stable"}}},
            "sink": {"udsink": {"container": {"image": "quay.io/numaio/numaflow-go/sink-log:stable"}}}
        }}}
    })
}

#[derive(Clone, Debug)]
enum Seg {
    Key(String),
    Idx(usize),
}

/// Every path in `v` below `spec` and `metadata` (not `apiVersion`/`kind`, which only choose
/// the resource).
fn paths(v: &Value) -> Vec<Vec<Seg>> {
    fn walk(v: &Value, here: &mut Vec<Seg>, out: &mut Vec<Vec<Seg>>) {
        out.push(here.clone());
        match v {
            Value::Object(m) => {
                for (k, c) in m {
                    here.push(Seg::Key(k.clone()));
                    walk(c, here, out);
                    here.pop();
                }
            }
            Value::Array(a) => {
                for (i, c) in a.iter().enumerate() {
                    here.push(Seg::Idx(i));
                    walk(c, here, out);
                    here.pop();
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    for top in ["spec", "metadata"] {
        let mut here = vec![Seg::Key(top.into())];
        walk(&v[top], &mut here, &mut out);
    }
    // The name is mutated by its own mutation, so cases stay unique.
    out.retain(
        |p| !matches!(p.as_slice(), [Seg::Key(m), Seg::Key(n)] if m == "metadata" && n == "name"),
    );
    out
}

fn at_mut<'a>(v: &'a mut Value, path: &[Seg]) -> Option<&'a mut Value> {
    path.iter().try_fold(v, |v, s| match s {
        Seg::Key(k) => v.get_mut(k.as_str()),
        Seg::Idx(i) => v.get_mut(*i),
    })
}

fn show(path: &[Seg]) -> String {
    path.iter()
        .map(|s| match s {
            Seg::Key(k) => format!(".{k}"),
            Seg::Idx(i) => format!("[{i}]"),
        })
        .collect::<String>()
        .trim_start_matches('.')
        .to_string()
}

const UNICODE: &[&str] = &[
    "ünïcödé",
    "名前パイプライン",
    "🚀🔥💧",
    "\u{202e}evil",
    "zero\u{200b}width",
    "nul\u{0000}byte",
    "line\nbreak",
    "\u{FFFF}\u{FFFE}",
    "e\u{0301}\u{0301}\u{0301}",
    "\"quoted\" and \\back",
];

const TEMPLATES: &[&str] = &[
    "{{.pipeline-name}}",
    "{{.monovertex-name}}-{{.pipeline-namespace}}",
    "{{",
    "}}",
    "{{.unknown-key}}",
    "{{ {{.pipeline-name}} }}",
    "{{.pipeline-name",
    "}}{{",
    "{{.isbsvc-name}}{{.isbsvc-namespace}}",
    "{{printf \"%s\" 1}}",
    "{{.vertex-name}}",
];

fn random_scalar(rng: &mut Rng) -> Value {
    match rng.below(11) {
        0 => Value::Null,
        1 => true.into(),
        2 => 0.into(),
        3 => (-1).into(),
        4 => 3.5.into(),
        5 => "x".into(),
        6 => "3x".into(),
        7 => json!([]),
        8 => json!({}),
        9 => json!([1, "a", null]),
        _ => json!({"a": 1}),
    }
}

fn huge(rng: &mut Rng) -> Value {
    match rng.below(8) {
        0 => i64::MAX.into(),
        1 => u64::MAX.into(),
        2 => i64::MIN.into(),
        3 => 1e308.into(),
        4 => (-1e308).into(),
        5 => "a".repeat(65_536).into(),
        6 => Value::Array(vec![0.into(); 5_000]),
        _ => Value::Object((0..2_000).map(|i| (format!("k{i}"), i.into())).collect()),
    }
}

/// Nesting past serde_json's 128 levels in arrays: the field is reported as unreadable.
/// Objects stop at 100 levels: the API server's managedFields mirror nested objects (not
/// arrays, which are atomic there) and `ObjectMeta` is read with the limit, so a rollout with
/// objects nested ~120 deep still fails the operator's list of its kind (docs/compatibility.md,
/// "Nesting depth").
fn deep(rng: &mut Rng) -> Value {
    if rng.chance(50) {
        let depth = *rng.pick(&[20usize, 60, 150, 300]);
        (0..depth).fold(json!("bottom"), |v, _| json!([v]))
    } else {
        let depth = *rng.pick(&[20usize, 60, 100]);
        (0..depth).fold(json!("bottom"), |v, _| json!({"a": v}))
    }
}

/// A rider of one of every kind a user might try: permitted ones, forbidden kinds, one in
/// another namespace, a cluster-scoped one, and malformed ones.
fn rider(rng: &mut Rng) -> Value {
    let definition = match rng.below(11) {
        0 => json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "cm-{{.pipeline-name}}"}, "data": {"k": "{{.pipeline-namespace}}"}}),
        1 => json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                    "metadata": {"name": "hpa"},
                    "spec": {"maxReplicas": 3, "scaleTargetRef": {"apiVersion": "numaflow.numaproj.io/v1alpha1", "kind": "Vertex", "name": "{{.vertex-name}}"}}}),
        2 => json!({"apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler",
                    "metadata": {"name": "vpa"}, "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "x"}}}),
        3 => json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                    "metadata": {"name": "pdb"}, "spec": {"maxUnavailable": 1}}),
        4 => json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "stolen"},
                    "stringData": {"k": "v"}}),
        5 => json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "elsewhere", "namespace": "kube-system"}, "data": {}}),
        6 => json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "rider-ns"}}),
        7 => json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"no": "name"}}),
        8 => json!({"kind": "ConfigMap", "metadata": {"name": "no-version"}}),
        9 => json!({"apiVersion": "no.such.group/v1", "kind": "Widget", "metadata": {"name": "w"}}),
        _ => random_scalar(rng),
    };
    let mut r = json!({"definition": definition});
    if rng.chance(50) {
        r["progressive"] = rng.chance(50).into();
    }
    if rng.chance(30) {
        r["perVertex"] = true.into();
    }
    r
}

fn strategy(rng: &mut Rng) -> Value {
    let schedule = *rng.pick(&[
        "0,0,0,1",
        "a,b,c,d",
        "-1,5,5,5",
        "1",
        "",
        "99999999999,1,1,1",
    ]);
    // Typed fields at and past their limits: a value the API server stores but the
    // operator's types refuse would stop every rollout of the kind.
    let int = *rng.pick(&[
        -1,
        i64::from(i32::MAX),
        i64::from(i32::MAX) + 1,
        i64::from(i32::MIN) - 1,
        i64::MAX,
    ]);
    match rng.below(7) {
        0 => json!({"progressive": {"assessmentSchedule": schedule}}),
        1 => json!({"progressive": {"forcePromote": true}}),
        2 => {
            json!({"analysis": {"templates": [{"templateName": "nowhere", "clusterScope": rng.chance(50)}]}})
        }
        3 => json!({"recycleStrategy": {"scaleFactor": int}}),
        4 => json!({"pauseResume": {"fastResume": true}, "ppnd": {"fastResume": "yes"}}),
        5 => {
            json!({"analysis": {"args": [{"name": "a", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
                                          {"name": "b", "valueFrom": {"fieldRef": {"fieldPath": "metadata.nowhere"}}}]}})
        }
        _ => random_scalar(rng),
    }
}

/// A name of a length at or around the limits, unique through `id`.
fn name_at_limit(rng: &mut Rng, id: &str) -> String {
    let len = *rng.pick(&[1usize, 62, 63, 64, 200, 253, 254]);
    match rng.below(5) {
        0 => format!("{id}-UPPER"),
        1 => format!("{id}_under"),
        2 => format!("{id}-ünï"),
        _ => {
            let mut n = format!("{id}-");
            while n.len() < len {
                n.push('a');
            }
            n
        }
    }
}

/// Sets the value at `keys`, creating objects where there are none; gives up at a value that
/// a mutation made something else than an object.
fn set(doc: &mut Value, keys: &[&str], v: Value) {
    let Some((last, parents)) = keys.split_last() else {
        return;
    };
    let mut at = doc;
    for k in parents {
        let Some(m) = at.as_object_mut() else {
            return;
        };
        at = m.entry(k.to_string()).or_insert_with(|| json!({}));
    }
    if let Some(m) = at.as_object_mut() {
        m.insert(last.to_string(), v);
    }
}

/// Applies one random mutation to `doc` and says what it did.
fn mutate(rng: &mut Rng, doc: &mut Value, id: &str) -> String {
    let all = paths(doc);
    let path = rng.pick(&all).clone();
    let child_spec = ["pipeline", "monoVertex", "interStepBufferService"]
        .into_iter()
        .find(|k| doc["spec"].get(k).is_some())
        .unwrap_or("pipeline");
    // Replaces the value at `path`, saying what it did.
    let replace = |doc: &mut Value, v: Value, what: String| {
        if let Some(t) = at_mut(doc, &path) {
            *t = v;
        }
        format!("{what} at {}", show(&path))
    };
    match rng.below(10) {
        0 => {
            let v = random_scalar(rng);
            replace(doc, v.clone(), format!("wrong type {v}"))
        }
        1 => {
            let Some((last, parent)) = path.split_last() else {
                return "nothing".into();
            };
            match (at_mut(doc, parent), last) {
                (Some(Value::Object(m)), Seg::Key(k)) => {
                    m.remove(k);
                }
                (Some(Value::Array(a)), Seg::Idx(i)) if *i < a.len() => {
                    a.remove(*i);
                }
                _ => {}
            }
            format!("removed {}", show(&path))
        }
        2 => {
            let key = if rng.chance(30) {
                rng.pick(UNICODE).to_string()
            } else if rng.chance(30) {
                rng.pick(TEMPLATES).to_string()
            } else {
                format!("extra{}", rng.below(100))
            };
            let v = random_scalar(rng);
            let what = format!("extra field {key:?} at {}", show(&path));
            if let Some(Value::Object(m)) = at_mut(doc, &path) {
                m.insert(key, v);
            }
            what
        }
        3 => replace(doc, huge(rng), "huge value".into()),
        4 => replace(doc, rng.pick(UNICODE).to_string().into(), "unicode".into()),
        5 => replace(doc, deep(rng), "deep nesting".into()),
        6 => {
            let t = rng.pick(TEMPLATES).to_string();
            replace(doc, t.clone().into(), format!("template {t:?}"))
        }
        7 => {
            let n = rng.below(4);
            let riders: Vec<Value> = (0..n).map(|_| rider(rng)).collect();
            let what = format!("riders {}", Value::Array(riders.clone()));
            if let Some(spec) = doc["spec"].as_object_mut() {
                spec.insert("riders".into(), riders.into());
            }
            what
        }
        8 => {
            let s = strategy(rng);
            let what = format!("strategy {s}");
            if let Some(spec) = doc["spec"].as_object_mut() {
                spec.insert("strategy".into(), s);
            }
            what
        }
        _ => {
            let name = name_at_limit(rng, id);
            let what = format!("name of {} characters", name.chars().count());
            set(doc, &["metadata", "name"], name.into());
            // The children's metadata gets a templated label too.
            set(
                doc,
                &["spec", child_spec, "metadata", "labels", "t"],
                "{{.pipeline-name}}".into(),
            );
            what
        }
    }
}

/// Case `i`: a base document and one to three mutations.
fn case(rng: &mut Rng, i: usize) -> (Value, Vec<String>) {
    let id = format!("h{i}");
    let mut doc = match rng.below(5) {
        0 => sample("numaplane.numaproj.io_v1alpha1_pipelinerollout.yaml"),
        1 => sample("numaplane.numaproj.io_v1alpha1_monovertexrollout.yaml"),
        2 => sample("numaplane.numaproj.io_v1alpha1_isbservicerollout.yaml"),
        3 => valid_pipeline(rng),
        _ => valid_monovertex(rng),
    };
    set(&mut doc, &["metadata", "name"], id.clone().into());
    let n = 1 + rng.below(3);
    let what = (0..n).map(|_| mutate(rng, &mut doc, &id)).collect();
    (doc, what)
}

fn resource(kind: &str) -> Option<ApiResource> {
    Some(match kind {
        "PipelineRollout" => ApiResource::erase::<numaplane_api::PipelineRollout>(&()),
        "MonoVertexRollout" => ApiResource::erase::<numaplane_api::MonoVertexRollout>(&()),
        "ISBServiceRollout" => ApiResource::erase::<numaplane_api::ISBServiceRollout>(&()),
        _ => return None,
    })
}

/// How the operator answered a case.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Deployed,
    Failed(String),
    Pending(String),
}

/// What the suite reads of a case: its metadata and status. Read raw, so a case nested deeper
/// than serde_json's limit in its spec is read too (it is skipped).
#[derive(serde::Deserialize)]
struct Case {
    metadata: kube::api::ObjectMeta,
    #[serde(default)]
    status: Value,
    /// Not read: raw, so it is skipped without serde_json's depth limit (an ignored field is
    /// not).
    #[serde(default, rename = "spec")]
    _spec: Option<Box<serde_json::value::RawValue>>,
}

/// Case `name` as the API server has it now (`None` once it is gone).
async fn read(client: &kube::Client, url: &str, name: &str) -> Result<Option<Case>, String> {
    let req = kube::core::Request::new(url)
        .get(name, &Default::default())
        .map_err(|e| e.to_string())?;
    match client.request::<Case>(req).await {
        Ok(c) => Ok(Some(c)),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// The operator's answer to the case's current generation, if it gave one.
fn answer(case: &Case) -> Option<Outcome> {
    let generation = case.metadata.generation?;
    let st = &case.status;
    if st["observedGeneration"].as_i64() != Some(generation) {
        return None;
    }
    let msg = st["message"].as_str().unwrap_or_default().to_string();
    match st["phase"].as_str()? {
        "Deployed" => Some(Outcome::Deployed),
        "Failed" => Some(Outcome::Failed(msg)),
        "Pending" if !msg.is_empty() => Some(Outcome::Pending(msg)),
        _ => None,
    }
}

/// A failure message names where the problem is: a field path of the rollout or its child.
fn names_a_field(msg: &str) -> bool {
    ["spec.", "metadata."].iter().any(|f| msg.contains(f))
}

#[derive(Default)]
struct Figures {
    generated: usize,
    refused: usize,
    deployed: usize,
    failed: usize,
    pending: usize,
    /// Seconds from create to answer, per answered case.
    answers: Vec<f64>,
    /// Seconds from delete to gone, per case.
    deletions: Vec<f64>,
    /// Cases whose deletion outlived [`DELETE_BOUND`] waiting only on Numaflow's finalizers.
    waited_on_numaflow: std::collections::BTreeSet<usize>,
    /// Seconds from a sentinel change to its child following it.
    sentinel: Vec<f64>,
}

/// The `q` quantile of `xs` (0 when empty).
fn quantile(xs: &[f64], q: f64) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(((v.len() as f64 - 1.0) * q).round() as usize)
        .copied()
        .unwrap_or(0.0)
}

/// A number from the environment, or `default`.
fn setting<T: std::str::FromStr>(var: &str, default: T) -> T {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// (generation, status) of a case as last read.
type Seen = (Option<i64>, Value);

/// An accepted case the suite waits on: first for its answer, then for it to go once deleted.
struct Tracked {
    i: usize,
    ar: ApiResource,
    name: String,
    what: Vec<String>,
    since: Instant,
    /// The last read, for the report if it is never answered.
    last_seen: Option<Result<Option<Seen>, String>>,
    pending: Option<String>,
}

impl Tracked {
    fn url(&self, client: &kube::Client, ns: &str) -> String {
        Api::<DynamicObject>::namespaced_with(client.clone(), ns, &self.ar)
            .resource_url()
            .to_string()
    }
}

/// Case `i` generated and sent as raw JSON: `Ok` if the API server stored it, else its refusal.
async fn send(
    client: &kube::Client,
    ns: &str,
    seed: u64,
    i: usize,
) -> (usize, Result<(ApiResource, String), String>, Vec<String>) {
    // Each case has its own stream: `HOSTILE_FROM=i HOSTILE_CASES=1` replays it.
    let mut rng = Rng(seed ^ (i as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93));
    let (doc, what) = case(&mut rng, i);
    if std::env::var_os("HOSTILE_VERBOSE").is_some() {
        let what: Vec<String> = what.iter().map(|w| w.chars().take(160).collect()).collect();
        println!("case {i}: {} {what:?}", doc["kind"]);
    }
    let kind = doc["kind"].as_str().unwrap_or_default();
    let ar = resource(kind).expect("a rollout kind");
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    // Sent as the raw JSON: a typed client could not even express most cases.
    let body = serde_json::to_vec(&doc).expect("JSON");
    let req = kube::core::Request::new(api.resource_url())
        .create(&PostParams::default(), body)
        .expect("request");
    let sent = client.request_text(req).await;
    let name = doc["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let res = match sent {
        Err(kube::Error::Api(s)) => Err(format!("{} {}", s.code, s.reason)),
        // Without a name (its metadata mutated away) nothing can have been created; the
        // answer was lost on the way (under load, a connection the client gave up on).
        Err(e) if name.is_empty() => Err(format!("not created (no name): {e}")),
        // Whether or not the client could read the answer (hyper refuses a head that is too
        // large, as one answer here had), the API server says whether it was created.
        sent => match read(client, api.resource_url(), &name).await {
            Ok(Some(_)) => Ok((ar, name)),
            Ok(None) => Err(format!(
                "not created: {:?}",
                sent.err().map(|e| e.to_string())
            )),
            Err(e) => panic!("case {i} ({name}) cannot be read back: {e}"),
        },
    };
    (i, res, what)
}

/// Reads at most this many cases at once, so the suite's polling stays a small share of the
/// API server's work.
const READS_AT_ONCE: usize = 8;
/// How long a deleted case may take to go: its children go first, and the real Numaflow
/// controller finalizing them falls minutes behind when many cases run at once (a Pipeline
/// took over 90 s with 60 cases in flight).
const DELETE_BOUND: Duration = support::invariants::CONVERGENCE_BOUND;
/// How long a deleted case may wait past [`DELETE_BOUND`] when Numaplane has done its part: every
/// child left is deleted and held only by its own (Numaflow's) finalizer, and the rollout said
/// so in a `ChildDeletionBlocked` Event. The real Numaflow controller finalizes pipelines one at
/// a time and falls further behind the longer a run goes.
const FOREIGN_DELETE_BOUND: Duration = Duration::from_secs(1200);
/// How often the suite looks at the cases in flight.
const POLL_EVERY: Duration = Duration::from_millis(500);
/// The sentinel is changed again once it followed and this many more cases were sent.
const SENTINEL_EVERY: usize = 10;

#[tokio::test]
async fn hostile_specs_are_answered_and_never_crash_the_operator() {
    let cases = setting("HOSTILE_CASES", DEFAULT_CASES);
    let seed = setting("HOSTILE_SEED", DEFAULT_SEED);
    let first = setting("HOSTILE_FROM", 0);
    let window = setting("HOSTILE_WINDOW", DEFAULT_WINDOW).max(1);
    let env = TestEnv::shared_real().await;
    let client = env.client();
    install_rbac(&client).await;
    let ns = env.create_namespace("hostile").await;
    let tmp = tempfile::tempdir().expect("tempdir");
    // `HOSTILE_KEEP=1` keeps the operator's log and config after the run, failed or not.
    let (_tmp, dir) = if std::env::var_os("HOSTILE_KEEP").is_some() {
        let dir = tmp.keep();
        println!("operator log and config kept in {}", dir.display());
        (None, dir)
    } else {
        let dir = tmp.path().to_path_buf();
        (Some(tmp), dir)
    };
    let config = dir.join("config.yaml");
    std::fs::write(&config, CONFIG).expect("config");
    let operator = Process::start(env, &ns, &config, &dir, "operator", &[]);
    install_numaflow(&client, "numaplane-system", &ns, "1.8.1").await;
    let history = support::invariants::Recorder::start(&client, &ns).await;
    history.configure(CONFIG);

    let ssa = PatchParams::apply("test-user").force();
    let mut isb = sample("numaplane.numaproj.io_v1alpha1_isbservicerollout.yaml");
    isb["metadata"]["namespace"] = ns.clone().into();
    let isbs: Api<numaplane_api::ISBServiceRollout> = Api::namespaced(client.clone(), &ns);
    isbs.patch(ISB, &ssa, &Patch::Apply(&isb))
        .await
        .expect("ISB service");
    let mut sentinel = valid_pipeline(&mut Rng(seed));
    sentinel["metadata"] = json!({"name": "sentinel", "namespace": ns});
    let prs: Api<numaplane_api::PipelineRollout> = Api::namespaced(client.clone(), &ns);
    prs.patch("sentinel", &ssa, &Patch::Apply(&sentinel))
        .await
        .expect("sentinel");
    let pipelines: Api<Pipeline> = Api::namespaced(client.clone(), &ns);
    // The ISB service and the sentinel first, so a case's time is the operator's answer.
    eventually("the sentinel Deployed", || async {
        let pr = prs.get_opt("sentinel").await.ok().flatten()?;
        let st = pr.status?;
        (st.status.phase == numaplane_api::common::Phase::Deployed).then_some(())
    })
    .await;

    let mut fig = Figures::default();
    let mut unnamed_failures = Vec::new();
    let mut failures: BTreeMap<String, usize> = BTreeMap::new();
    let mut slowest_case = (String::new(), 0.0);
    let mut refusals: BTreeMap<String, usize> = BTreeMap::new();
    let started = Instant::now();
    // A sliding window: up to `window` cases wait for their answer at once; an answered case
    // is deleted at once and watched until it is gone, while the next ones are sent.
    let (mut next, end) = (first, first + cases);
    let mut answering: Vec<Tracked> = Vec::new();
    let mut deleting: Vec<Tracked> = Vec::new();
    // The sentinel's current mark, when it was set, and how many cases had been sent by then.
    let mut mark = (0usize, Instant::now(), 0usize);
    let mut followed = true;
    let mut last_log_check = Instant::now();
    loop {
        let room = window.saturating_sub(answering.len()).min(end - next);
        if room > 0 {
            let sent = join_all((next..next + room).map(|i| send(&client, &ns, seed, i))).await;
            next += room;
            fig.generated += room;
            for (i, res, what) in sent {
                match res {
                    Ok((ar, name)) => answering.push(Tracked {
                        i,
                        ar,
                        name,
                        what,
                        since: Instant::now(),
                        last_seen: None,
                        pending: None,
                    }),
                    Err(reason) => {
                        fig.refused += 1;
                        *refusals.entry(reason).or_default() += 1;
                    }
                }
            }
        }
        // The sentinel is changed too, and must follow each change.
        if followed && next - mark.2 >= SENTINEL_EVERY {
            mark = (mark.0 + 1, Instant::now(), next);
            followed = false;
            prs.patch(
                "sentinel",
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"spec": {"pipeline": {"metadata": {"labels": {"batch": mark.0.to_string()}}}}}),
                ),
            )
            .await
            .expect("change the sentinel");
        }
        if answering.is_empty() && deleting.is_empty() && next == end && followed {
            break;
        }
        tokio::time::sleep(POLL_EVERY).await;

        let reads: Vec<_> = stream::iter(answering.iter().chain(deleting.iter()))
            .map(|c| {
                let url = c.url(&client, &ns);
                let client = client.clone();
                async move { read(&client, &url, &c.name).await }
            })
            .buffered(READS_AT_ONCE)
            .collect()
            .await;
        let (now_answering, now_deleting) = reads.split_at(answering.len());
        let mut still = Vec::new();
        for (mut c, case) in answering.drain(..).zip(now_answering.iter()) {
            let waited = c.since.elapsed();
            let outcome = case.as_ref().ok().and_then(Option::as_ref).and_then(answer);
            c.last_seen = Some(
                case.as_ref()
                    .map(|o| {
                        o.as_ref()
                            .map(|c| (c.metadata.generation, c.status.clone()))
                    })
                    .map_err(Clone::clone),
            );
            let done = match outcome.clone() {
                Some(Outcome::Deployed) => {
                    fig.deployed += 1;
                    true
                }
                Some(Outcome::Failed(msg)) => {
                    fig.failed += 1;
                    let short: String = msg.chars().take(400).collect();
                    *failures.entry(short).or_default() += 1;
                    if !names_a_field(&msg) {
                        unnamed_failures
                            .push(format!("case {} ({}; {:?}): {msg}", c.i, c.name, c.what));
                    }
                    true
                }
                Some(Outcome::Pending(reason)) => {
                    c.pending = Some(reason);
                    false
                }
                None => false,
            };
            let done = if !done && waited > ANSWER_BOUND {
                // Pending with a reason for the whole bound is an answer; nothing is not.
                assert!(
                    c.pending.is_some(),
                    "case {} ({}, seed {seed}) was not answered within {ANSWER_BOUND:?}; mutations: {:?}; last seen (generation, status): {:?}; the operator's log about it:\n{}",
                    c.i,
                    c.name,
                    c.what,
                    c.last_seen,
                    log_about(&operator, &c.name)
                );
                fig.pending += 1;
                true
            } else {
                done
            };
            if !done {
                still.push(c);
                continue;
            }
            let secs = waited.as_secs_f64();
            fig.answers.push(secs);
            if secs > slowest_case.1 {
                slowest_case = (format!("case {} ({}): {:?}", c.i, c.name, outcome), secs);
            }
            // Every case goes away when deleted (no stuck finalizer).
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &c.ar);
            let _ = api.delete(&c.name, &DeleteParams::default()).await;
            c.since = Instant::now();
            deleting.push(c);
        }
        answering = still;
        let mut still = Vec::new();
        for (c, case) in deleting
            .drain(..)
            .zip(now_deleting.iter().map(Some).chain(std::iter::repeat(None)))
        {
            match case {
                Some(Ok(None)) => fig.deletions.push(c.since.elapsed().as_secs_f64()),
                _ => {
                    let waited = c.since.elapsed();
                    // Seen while Numaflow still holds the children: when its finalizer goes
                    // right before the bound, Numaplane needs a moment to notice and finish.
                    if waited >= DELETE_BOUND / 2
                        && !fig.waited_on_numaflow.contains(&c.i)
                        && numaflow_holds_the_children(&client, &ns, &c.name).await
                    {
                        fig.waited_on_numaflow.insert(c.i);
                    }
                    if waited >= DELETE_BOUND
                        && waited < FOREIGN_DELETE_BOUND
                        && (fig.waited_on_numaflow.contains(&c.i)
                            || numaflow_holds_the_children(&client, &ns, &c.name).await)
                    {
                        fig.waited_on_numaflow.insert(c.i);
                        still.push(c);
                        continue;
                    }
                    assert!(
                        waited < DELETE_BOUND,
                        "case {} ({}, seed {seed}, {:?}) not gone {DELETE_BOUND:?} after its delete; last read: {:?}; the operator's log about it:\n{}",
                        c.i,
                        c.name,
                        c.what,
                        case.map(|r| r.as_ref().map(|o| o.as_ref().map(|o| (
                            &o.metadata.finalizers,
                            &o.metadata.deletion_timestamp,
                            &o.status
                        )))),
                        log_about(&operator, &c.name)
                    );
                    still.push(c);
                }
            }
        }
        deleting = still;

        if !followed {
            let follows = pipelines
                .get_opt("sentinel-0")
                .await
                .ok()
                .flatten()
                .and_then(|p| p.metadata.labels?.get("batch").cloned())
                == Some(mark.0.to_string());
            if follows {
                fig.sentinel.push(mark.1.elapsed().as_secs_f64());
                followed = true;
            } else {
                assert!(
                    mark.1.elapsed() < ANSWER_BOUND,
                    "the sentinel did not follow change {} within {ANSWER_BOUND:?} (seed {seed})",
                    mark.0
                );
            }
        }
        if last_log_check.elapsed() > Duration::from_secs(15) {
            last_log_check = Instant::now();
            assert_no_panic(&operator, seed);
            if std::env::var_os("HOSTILE_VERBOSE").is_some() {
                let oldest = |cs: &[Tracked]| {
                    cs.iter()
                        .map(|c| (c.since.elapsed().as_secs(), c.i))
                        .max()
                        .unwrap_or_default()
                };
                println!(
                    "progress {:.0} s: {} sent, {} answered, waiting for {} answers (oldest {:?}) and {} deletions (oldest {:?})",
                    started.elapsed().as_secs_f64(),
                    next - first,
                    fig.answers.len(),
                    answering.len(),
                    oldest(&answering),
                    deleting.len(),
                    oldest(&deleting)
                );
            }
        }
    }
    assert_no_panic(&operator, seed);
    let mut op = operator;
    assert!(
        matches!(op.child.try_wait(), Ok(None)),
        "the operator exited during the run"
    );
    assert!(
        unnamed_failures.is_empty(),
        "failures that do not name the field:\n{}",
        unnamed_failures.join("\n")
    );
    history.assert_held(&client, &ns).await;
    let accepted = fig.generated - fig.refused;
    let seconds = started.elapsed().as_secs_f64();
    let figure = format!(
        "FIGURE hostile input: seed {seed}, cases {first}..{end} ({}) in {seconds:.0} s ({:.2} s a case, {window} at once): {} refused by the API server, {accepted} accepted: {} Deployed, {} Failed naming the field, {} Pending with a reason, 0 unanswered; 0 panics, 0 operator restarts; answers p50 {:.1} s, p99 {:.1} s, slowest {:.1} s; deleted cases gone p50 {:.1} s, slowest {:.1} s ({} waited past {DELETE_BOUND:?} on Numaflow's own finalizers, reported in ChildDeletionBlocked); the sentinel followed {} changes, slowest {:.1} s",
        fig.generated,
        seconds / fig.generated.max(1) as f64,
        fig.refused,
        fig.deployed,
        fig.failed,
        fig.pending,
        quantile(&fig.answers, 0.5),
        quantile(&fig.answers, 0.99),
        quantile(&fig.answers, 1.0),
        quantile(&fig.deletions, 0.5),
        quantile(&fig.deletions, 1.0),
        fig.waited_on_numaflow.len(),
        fig.sentinel.len(),
        quantile(&fig.sentinel, 1.0),
    );
    println!("{figure}");
    println!(
        "slowest answer: {} after {:.1} s",
        slowest_case.0, slowest_case.1
    );
    println!("refusals by the API server: {refusals:?}");
    println!("failures reported by the operator:");
    for (msg, n) in &failures {
        println!("  {n} x {msg}");
    }
    if let Ok(path) = std::env::var("HOSTILE_RESULTS") {
        let results = json!({
            "seed": seed, "from": first, "cases": fig.generated, "refusedByApiServer": fig.refused,
            "deployed": fig.deployed, "failedNamingField": fig.failed, "pending": fig.pending,
            "unanswered": 0, "panics": 0, "operatorRestarts": 0, "window": window,
            "answerSecondsP50": quantile(&fig.answers, 0.5),
            "answerSecondsP99": quantile(&fig.answers, 0.99),
            "answerSecondsMax": quantile(&fig.answers, 1.0),
            "deletionSecondsP50": quantile(&fig.deletions, 0.5),
            "deletionSecondsMax": quantile(&fig.deletions, 1.0),
            "deletionsWaitingOnNumaflow": fig.waited_on_numaflow.len(),
            "sentinelChangesFollowed": fig.sentinel.len(),
            "sentinelFollowSecondsMax": quantile(&fig.sentinel, 1.0),
            "seconds": seconds, "summary": figure,
        });
        record_run(std::path::Path::new(&path), results);
    }
}

/// Whether everything left of deleted case `name` is Numaflow's to finish: it has children, each
/// deleted and held only by finalizers that are not Numaplane's, and the rollout reported the
/// wait in a Warning Event `ChildDeletionBlocked`.
async fn numaflow_holds_the_children(client: &kube::Client, ns: &str, name: &str) -> bool {
    let selector = format!("numaplane.numaproj.io/parent-rollout-name={name}");
    let mut children = Vec::new();
    for (kind, plural) in [
        ("Pipeline", "pipelines"),
        ("MonoVertex", "monovertices"),
        ("InterStepBufferService", "interstepbufferservices"),
    ] {
        let gvk = kube::core::GroupVersionKind::gvk("numaflow.numaproj.io", "v1alpha1", kind);
        let ar = ApiResource::from_gvk_with_plural(&gvk, plural);
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
        match api
            .list(&kube::api::ListParams::default().labels(&selector))
            .await
        {
            Ok(list) => children.extend(list.items),
            Err(e) => {
                eprintln!("listing the {kind}s of {name}: {e}");
                return false;
            }
        }
    }
    let foreign_only = |o: &DynamicObject| {
        o.metadata.deletion_timestamp.is_some()
            && o.metadata
                .finalizers
                .iter()
                .flatten()
                .all(|f| !f.starts_with("numaplane.numaproj.io/"))
    };
    if children.is_empty() || !children.iter().all(foreign_only) {
        return false;
    }
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), ns);
    events.list(&Default::default()).await.is_ok_and(|l| {
        l.items.iter().any(|e| {
            e.reason.as_deref() == Some("ChildDeletionBlocked")
                && e.type_.as_deref() == Some("Warning")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
        })
    })
}

/// Adds a run's figures to the results file, so `make fuzz` can cover one seed's cases in
/// ranges (`FUZZ_FROM`, `FUZZ_CASES`): a run replaces the earlier runs its range overlaps, and
/// `totals` sums the runs of each seed.
fn record_run(path: &std::path::Path, run: Value) {
    let old: Value = std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    let range = |r: &Value| {
        let from = r["from"].as_u64().unwrap_or(0);
        (from, from + r["cases"].as_u64().unwrap_or(0))
    };
    let (from, to) = range(&run);
    let mut runs: Vec<Value> = old["runs"].as_array().cloned().unwrap_or_default();
    runs.retain(|r| {
        let (f, t) = range(r);
        r["seed"] != run["seed"] || t <= from || to <= f
    });
    runs.push(run);
    runs.sort_by_key(|r| (r["seed"].as_u64(), range(r).0));
    let mut totals = serde_json::Map::new();
    for r in &runs {
        let t = totals
            .entry(r["seed"].to_string())
            .or_insert_with(|| json!({}));
        for key in [
            "cases",
            "refusedByApiServer",
            "deployed",
            "failedNamingField",
            "pending",
            "unanswered",
            "panics",
            "operatorRestarts",
        ] {
            t[key] = json!(t[key].as_u64().unwrap_or(0) + r[key].as_u64().unwrap_or(0));
        }
        t["seconds"] =
            json!(t["seconds"].as_f64().unwrap_or(0.0) + r["seconds"].as_f64().unwrap_or(0.0));
        t["runs"] = json!(t["runs"].as_u64().unwrap_or(0) + 1);
    }
    let doc = json!({"runs": runs, "totals": totals});
    std::fs::write(path, serde_json::to_string_pretty(&doc).expect("json")).expect("write results");
}

/// The operator's log lines that name `name` (each cut to 600 characters).
fn log_about(operator: &Process, name: &str) -> String {
    operator
        .log_text()
        .lines()
        .filter(|l| l.contains(name))
        .map(|l| l.chars().take(600).collect::<String>())
        .collect::<Vec<_>>()
        .join("\n")
}

fn assert_no_panic(operator: &Process, seed: u64) {
    let log = operator.log_text();
    assert!(
        !log.contains("panicked at"),
        "the operator panicked (seed {seed}):\n{log}"
    );
}
