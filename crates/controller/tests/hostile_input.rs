//! Hostile input (issue "Reliability…", item 4): rollout specs generated from the reference
//! samples and from random valid specs, then mutated with knowledge of their structure (wrong
//! types, missing and extra fields, huge values, unicode, deep nesting, template tags in odd
//! places, riders of every kind, names at the length limits), sent through the real API server
//! to a Numaplane operator process running under the shipped ClusterRole.
//!
//! Every case the API server accepts must be answered: its generation observed, and phase
//! Deployed, or Failed with a message naming the field, or Pending saying what it waits for. The
//! operator must never panic nor exit, a sentinel rollout changed every batch must keep
//! converging, every case must go away when deleted, and the namespace's upgrade invariants
//! must hold throughout.
//!
//! `HOSTILE_CASES` (default 60, the slice `make test` runs) and `HOSTILE_SEED` choose the run;
//! `make fuzz` runs 10,000. Every case draws from its own seeded stream, so a failure names the
//! case and `HOSTILE_FROM=<case> HOSTILE_CASES=1` replays it (`HOSTILE_VERBOSE=1` prints every
//! case's mutations). `HOSTILE_RESULTS=<file>` writes the figures as JSON.

mod support;

use futures::future::join_all;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use numaplane_api::numaflow::Pipeline;
use numaplane_testenv::TestEnv;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use support::{Process, eventually, install_numaflow, install_rbac, repo};

const DEFAULT_CASES: usize = 60;
const DEFAULT_SEED: u64 = 20261202;
const BATCH: usize = 10;
/// How long the operator has to answer a batch (every case created at once).
const ANSWER_BOUND: Duration = Duration::from_secs(90);

const CONFIG: &str = r#"
defaultUpgradeStrategy: "no-strategy"
permittedRiders: "group=autoscaling.k8s.io,kind=VerticalPodAutoscaler;group=,kind=ConfigMap;group=autoscaling,kind=HorizontalPodAutoscaler;group=policy,kind=PodDisruptionBudget"
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
/// objects nested ~120 deep still fails the operator's list of its kind (README, known
/// limitations).
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

struct Figures {
    generated: usize,
    refused: usize,
    deployed: usize,
    failed: usize,
    pending: usize,
    slowest: Duration,
}

/// A number from the environment, or `default`.
fn setting<T: std::str::FromStr>(var: &str, default: T) -> T {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::test]
async fn hostile_specs_are_answered_and_never_crash_the_operator() {
    let cases = setting("HOSTILE_CASES", DEFAULT_CASES);
    let seed = setting("HOSTILE_SEED", DEFAULT_SEED);
    let first = setting("HOSTILE_FROM", 0);
    let env = TestEnv::shared_real().await;
    let client = env.client();
    install_rbac(&client).await;
    let ns = env.create_namespace("hostile").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, CONFIG).expect("config");
    let operator = Process::start(env, &ns, &config, dir.path(), "operator", &[]);
    install_numaflow(&client, "numaplane-system", &ns, "1.8.1").await;
    let history = support::invariants::Recorder::start(&client, &ns).await;

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
    // The ISB service and the sentinel first, so a batch's time is the operator's answer.
    eventually("the sentinel Deployed", || async {
        let pr = prs.get_opt("sentinel").await.ok().flatten()?;
        let st = pr.status?;
        (st.status.phase == numaplane_api::common::Phase::Deployed).then_some(())
    })
    .await;

    let mut fig = Figures {
        generated: 0,
        refused: 0,
        deployed: 0,
        failed: 0,
        pending: 0,
        slowest: Duration::ZERO,
    };
    let mut unnamed_failures = Vec::new();
    let mut failures: BTreeMap<String, usize> = BTreeMap::new();
    let mut slowest_case = (String::new(), Duration::ZERO);
    let mut refusals: BTreeMap<String, usize> = BTreeMap::new();
    let started = Instant::now();
    for batch in 0..cases.div_ceil(BATCH) {
        let generated: Vec<(usize, Value, Vec<String>)> = (first + batch * BATCH
            ..(first + (batch + 1) * BATCH).min(first + cases))
            .map(|i| {
                // Each case has its own stream: `HOSTILE_FROM=i HOSTILE_CASES=1` replays it.
                let mut rng = Rng(seed ^ (i as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93));
                let (doc, what) = case(&mut rng, i);
                (i, doc, what)
            })
            .collect();
        fig.generated += generated.len();
        if std::env::var_os("HOSTILE_VERBOSE").is_some() {
            for (i, doc, what) in &generated {
                let what: Vec<String> =
                    what.iter().map(|w| w.chars().take(160).collect()).collect();
                println!("case {i}: {} {what:?}", doc["kind"]);
            }
        }
        let creates = generated.iter().map(|(i, doc, what)| {
            let (client, ns) = (client.clone(), ns.clone());
            async move {
                let kind = doc["kind"].as_str().unwrap_or_default();
                let ar = resource(kind).expect("a rollout kind");
                let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);
                // Sent as the raw JSON: a typed client could not even express most cases.
                let body = serde_json::to_vec(doc).expect("JSON");
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
                    // Whether or not the client could read the answer (hyper refuses a head
                    // that is too large, as one answer here had), the API server says whether
                    // it was created.
                    sent => match read(&client, api.resource_url(), &name).await {
                        Ok(Some(_)) => Ok((ar, name)),
                        Ok(None) => Err(format!(
                            "not created: {:?}",
                            sent.err().map(|e| e.to_string())
                        )),
                        Err(e) => panic!("case {i} ({name}) cannot be read back: {e}"),
                    },
                };
                (*i, res, what.clone())
            }
        });
        let created = join_all(creates).await;
        let mut accepted = Vec::new();
        for (i, res, what) in created {
            match res {
                Ok(a) => accepted.push((i, a, what)),
                Err(reason) => {
                    fig.refused += 1;
                    *refusals.entry(reason).or_default() += 1;
                }
            }
        }
        // The sentinel is changed too, and must follow.
        let mark = batch.to_string();
        prs.patch(
            "sentinel",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"pipeline": {"metadata": {"labels": {"batch": mark}}}}})),
        )
        .await
        .expect("change the sentinel");

        let t0 = Instant::now();
        let mut answers: BTreeMap<usize, Outcome> = BTreeMap::new();
        let mut last_seen = BTreeMap::new();
        loop {
            for (i, (ar, name), _) in &accepted {
                if matches!(answers.get(i), Some(Outcome::Deployed | Outcome::Failed(_))) {
                    continue;
                }
                let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, ar);
                let case = read(&client, api.resource_url(), name).await;
                if let Some(a) = case.as_ref().ok().and_then(Option::as_ref).and_then(answer) {
                    if matches!(a, Outcome::Deployed | Outcome::Failed(_))
                        && t0.elapsed() > slowest_case.1
                    {
                        slowest_case = (format!("case {i} ({name}): {a:?}"), t0.elapsed());
                    }
                    answers.insert(*i, a);
                }
                let seen = case.map(|c| c.map(|c| (c.metadata.generation, c.status)));
                last_seen.insert(*i, seen);
            }
            let sentinel_follows = pipelines
                .get_opt("sentinel-0")
                .await
                .ok()
                .flatten()
                .and_then(|p| p.metadata.labels?.get("batch").cloned())
                .as_deref()
                == Some(mark.as_str());
            let settled = accepted.iter().all(|(i, _, _)| {
                matches!(answers.get(i), Some(Outcome::Deployed | Outcome::Failed(_)))
            });
            if (settled && sentinel_follows) || t0.elapsed() > ANSWER_BOUND {
                assert!(
                    sentinel_follows,
                    "batch {batch} (seed {seed}): the sentinel did not follow its change within {ANSWER_BOUND:?}"
                );
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        fig.slowest = fig.slowest.max(t0.elapsed());
        for (i, (_, name), what) in &accepted {
            match answers.get(i) {
                Some(Outcome::Deployed) => fig.deployed += 1,
                Some(Outcome::Failed(msg)) => {
                    fig.failed += 1;
                    let short: String = msg.chars().take(400).collect();
                    *failures.entry(short).or_default() += 1;
                    if !names_a_field(msg) {
                        unnamed_failures.push(format!("case {i} ({name}; {what:?}): {msg}"));
                    }
                }
                Some(Outcome::Pending(_)) => fig.pending += 1,
                None => panic!(
                    "case {i} ({name}, seed {seed}) was not answered within {ANSWER_BOUND:?}; mutations: {what:?}; last seen (generation, status): {:?}; the operator's log about it:\n{}",
                    last_seen.get(i),
                    operator
                        .log_text()
                        .lines()
                        .filter(|l| l.contains(name.as_str()))
                        .map(|l| l.chars().take(600).collect::<String>())
                        .collect::<Vec<_>>()
                        .join("\n")
                ),
            }
        }
        assert!(
            operator.log_text().matches("panicked at").count() == 0,
            "the operator panicked (seed {seed}, batch {batch}):\n{}",
            operator.log_text()
        );
        // Every case goes away when deleted (no stuck finalizer).
        for (_, (ar, name), _) in &accepted {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, ar);
            let _ = api.delete(name, &DeleteParams::default()).await;
        }
        for (i, (ar, name), what) in &accepted {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, ar);
            eventually(&format!("case {i} ({name}, {what:?}) deleted"), || async {
                matches!(read(&client, api.resource_url(), name).await, Ok(None)).then_some(())
            })
            .await;
        }
    }
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
    let figure = format!(
        "FIGURE hostile input: seed {seed}, {} cases in {:.0} s: {} refused by the API server, {accepted} accepted: {} Deployed, {} Failed naming the field, {} Pending with a reason, 0 unanswered; 0 panics, 0 operator restarts; slowest batch of {BATCH} answered in {:.1} s",
        fig.generated,
        started.elapsed().as_secs_f64(),
        fig.refused,
        fig.deployed,
        fig.failed,
        fig.pending,
        fig.slowest.as_secs_f64()
    );
    println!("{figure}");
    println!(
        "slowest answer: {} after {:.1} s",
        slowest_case.0,
        slowest_case.1.as_secs_f64()
    );
    println!("refusals by the API server: {refusals:?}");
    println!("failures reported by the operator:");
    for (msg, n) in &failures {
        println!("  {n} x {msg}");
    }
    if let Ok(path) = std::env::var("HOSTILE_RESULTS") {
        let results = json!({
            "seed": seed, "cases": fig.generated, "refusedByApiServer": fig.refused,
            "deployed": fig.deployed, "failedNamingField": fig.failed, "pending": fig.pending,
            "unanswered": 0, "panics": 0, "operatorRestarts": 0,
            "slowestBatchSeconds": fig.slowest.as_secs_f64(),
            "seconds": started.elapsed().as_secs_f64(), "summary": figure,
        });
        std::fs::write(&path, serde_json::to_string_pretty(&results).expect("json"))
            .expect("write results");
    }
}
