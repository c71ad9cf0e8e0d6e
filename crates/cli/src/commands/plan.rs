//! `plan -f FILE`: which upgrade strategy applying an edited rollout manifest would trigger, and
//! which fields decide it. It gathers what the controller looks at (the live promoted child, the
//! USDE ConfigMap, the global and namespace strategies, the live riders), renders the desired
//! child with the controller's own code (`numaplane_core::child`) and asks the controller's own
//! decision (`numaplane_core::usde`). Nothing is written.

use crate::cli::{PlanArgs, PlanOutput};
use crate::cluster::{Cluster, list_or_empty};
use crate::manifests;
use anyhow::{Context, Result, anyhow, bail};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, ListParams};
use numaplane_api::Kind;
use numaplane_api::common::UpgradeStrategy;
use numaplane_api::keys::{config_kind, labels, upgrade_state};
use numaplane_core::child;
use numaplane_core::config::{
    ControllerConfig, UsdeConfig, UserStrategy, parse_controller_config, parse_namespace_config,
    parse_usde_configmap,
};
use numaplane_core::desired::{self, Inputs, KindInputs, LiveChild, RenderedChild};
use numaplane_core::ppnd;
use numaplane_core::riders::{ExistingRider, RiderSpec};
use numaplane_core::template::TemplateVars;
use numaplane_core::usde::{self, ChangeClass, DecisionInput};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// Name of the global controller ConfigMap (its `config.yaml` is the controller config file).
const CONTROLLER_CONFIGMAP: &str = "numaplane-controller-config";

/// What `plan` prints (also the `-o json` document).
#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    pub kind: String,
    pub name: String,
    pub namespace: String,
    /// `progressive`, `pause-and-drain` or `no-strategy`.
    pub user_strategy: String,
    /// Where the user strategy comes from.
    pub user_strategy_source: String,
    /// The live child compared against, if any.
    pub live_child: Option<String>,
    /// `create`, `no-op`, `direct-apply`, `pause-and-drain` or `progressive`.
    pub strategy: String,
    /// A recreate field changed (the child is deleted and created anew where the kind does so).
    pub recreate: bool,
    /// The fields, labels, annotations or riders that decided the strategy.
    pub fields: Vec<PlanField>,
    pub notes: Vec<String>,
}

#[derive(Debug, Serialize, PartialEq)]
pub struct PlanField {
    pub path: String,
    /// `recreate`, `dataLoss`, `progressive`, `other`, `metadata` or `rider`.
    pub class: String,
}

/// The strategy's name, as users write strategies.
pub fn strategy_name(s: UpgradeStrategy) -> &'static str {
    match s {
        UpgradeStrategy::NoOp | UpgradeStrategy::Error => "no-op",
        UpgradeStrategy::DirectApply => "direct-apply",
        UpgradeStrategy::PipelinePauseAndDrain => "pause-and-drain",
        UpgradeStrategy::Progressive => "progressive",
    }
}

fn class_name(c: ChangeClass) -> &'static str {
    match c {
        ChangeClass::Recreate => "recreate",
        ChangeClass::DataLoss => "dataLoss",
        ChangeClass::Progressive => "progressive",
        ChangeClass::Other => "other",
        ChangeClass::Metadata => "metadata",
        ChangeClass::Rider => "rider",
    }
}

fn str_at<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or_default()
}

/// The user strategy in force for `ns`, and where it came from.
struct Strategies {
    user: UserStrategy,
    source: String,
    usde: Option<UsdeConfig>,
    controller: ControllerConfig,
    notes: Vec<String>,
}

async fn strategies(cluster: &Cluster, ns: &str, controller_ns: &str) -> Result<Strategies> {
    let mut notes = Vec::new();
    let cms = |ns: &str| -> Api<ConfigMap> { Api::namespaced(cluster.client.clone(), ns) };
    let controller = match cms(controller_ns)
        .get_opt(CONTROLLER_CONFIGMAP)
        .await
        .with_context(|| format!("getting ConfigMap {controller_ns}/{CONTROLLER_CONFIGMAP}"))?
    {
        Some(cm) => {
            let text = cm
                .data
                .as_ref()
                .and_then(|d| d.get("config.yaml"))
                .cloned()
                .unwrap_or_default();
            parse_controller_config(&text).with_context(|| {
                format!("ConfigMap {controller_ns}/{CONTROLLER_CONFIGMAP}: config.yaml")
            })?
        }
        None => {
            notes.push(format!(
                "no ConfigMap {controller_ns}/{CONTROLLER_CONFIGMAP}: assuming the defaults \
                 (defaultUpgradeStrategy no-strategy, no riders permitted); use \
                 --controller-namespace if Numaplane runs elsewhere"
            ));
            ControllerConfig::default()
        }
    };
    let usde_selector =
        ListParams::default().labels(&format!("{}={}", labels::CONFIG, config_kind::USDE_CONFIG));
    let usde_cms = cms(controller_ns)
        .list(&usde_selector)
        .await
        .with_context(|| format!("listing the USDE ConfigMap in {controller_ns}"))?
        .items;
    let usde = match newest(usde_cms) {
        Some(cm) => Some(
            parse_usde_configmap(&cm.data.clone().unwrap_or_default()).with_context(|| {
                format!(
                    "USDE ConfigMap {controller_ns}/{}",
                    cm.metadata.name.clone().unwrap_or_default()
                )
            })?,
        ),
        None => {
            notes.push(format!(
                "no USDE ConfigMap (label {}={}) in {controller_ns}: every change is applied directly",
                labels::CONFIG,
                config_kind::USDE_CONFIG
            ));
            None
        }
    };
    let ns_selector = ListParams::default().labels(&format!(
        "{}={}",
        labels::CONFIG,
        config_kind::NAMESPACE_LEVEL_CONFIG
    ));
    let ns_cm = if ns == controller_ns {
        None // the controller reads namespace-level ConfigMaps only outside its own namespace
    } else {
        newest(
            cms(ns)
                .list(&ns_selector)
                .await
                .with_context(|| format!("listing namespace-level ConfigMaps in {ns}"))?
                .items,
        )
    };
    let global = controller.default_upgrade_strategy;
    let (user, source) = match ns_cm {
        Some(cm) => {
            let name = cm.metadata.name.clone().unwrap_or_default();
            match parse_namespace_config(&cm.data.clone().unwrap_or_default()) {
                Ok(s) => (s, format!("ConfigMap {ns}/{name} (upgradeStrategy)")),
                Err(e) => {
                    notes.push(format!(
                        "ConfigMap {ns}/{name} is invalid ({e}): the controller keeps the previous namespace strategy; assuming the global default"
                    ));
                    (global, global_source(controller_ns))
                }
            }
        }
        None => (global, global_source(controller_ns)),
    };
    Ok(Strategies {
        user,
        source,
        usde,
        controller,
        notes,
    })
}

fn global_source(controller_ns: &str) -> String {
    format!("global defaultUpgradeStrategy (ConfigMap {controller_ns}/{CONTROLLER_CONFIGMAP})")
}

/// The newest object (the controller keeps the last one it saw).
fn newest<K: kube::Resource>(items: Vec<K>) -> Option<K> {
    items
        .into_iter()
        .max_by_key(|o| o.meta().creation_timestamp.as_ref().map(|t| t.0))
}

fn child_api(cluster: &Cluster, ns: &str, kind: Kind) -> Api<DynamicObject> {
    Api::namespaced_with(cluster.client.clone(), ns, &kind.child_resource())
}

/// The live child the controller compares with: the NumaflowController of the rollout's name,
/// else the newest child labelled promoted.
async fn live_child(cluster: &Cluster, ns: &str, kind: Kind, name: &str) -> Result<Option<Value>> {
    let api = child_api(cluster, ns, kind);
    let found = if kind == Kind::NumaflowController {
        api.get_opt(name).await?
    } else {
        let selector = format!(
            "{}={name},{}={}",
            labels::PARENT_ROLLOUT_NAME,
            labels::UPGRADE_STATE,
            upgrade_state::PROMOTED
        );
        let children = list_or_empty(&api, &ListParams::default().labels(&selector)).await?;
        newest(
            children
                .into_iter()
                .filter(|c| c.metadata.deletion_timestamp.is_none())
                .collect(),
        )
    };
    found.map(|c| Ok(serde_json::to_value(c)?)).transpose()
}

/// The ISB service child a pipeline of `isb_rollout` would use: the newest trial, else the
/// newest promoted one (as the controller picks it).
async fn current_isbsvc(cluster: &Cluster, ns: &str, isb_rollout: &str) -> Result<Option<String>> {
    let api = child_api(cluster, ns, Kind::IsbService);
    let selector = format!("{}={isb_rollout}", labels::PARENT_ROLLOUT_NAME);
    let all = list_or_empty(&api, &ListParams::default().labels(&selector)).await?;
    for state in [
        upgrade_state::TRIAL,
        upgrade_state::IN_PROGRESS,
        upgrade_state::PROMOTED,
    ] {
        let of_state: Vec<DynamicObject> = all
            .iter()
            .filter(|c| {
                c.metadata.deletion_timestamp.is_none()
                    && c.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(labels::UPGRADE_STATE))
                        .map(String::as_str)
                        == Some(state)
            })
            .cloned()
            .collect();
        if let Some(c) = newest(of_state) {
            return Ok(c.metadata.name);
        }
    }
    Ok(None)
}

fn string_map(v: &Value, ptr: &str) -> BTreeMap<String, String> {
    v.pointer(ptr)
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
        .collect()
}

/// Checks the child spec as the controller would before doing anything.
fn validate(kind: Kind, spec: &Value) -> Result<()> {
    let path = kind.spec_path();
    let res = match kind {
        Kind::Pipeline => child::validate_pipeline_spec(spec, path)
            .map_err(|e| format!("invalid Numaflow Pipeline spec: {e}")),
        Kind::MonoVertex => child::validate_monovertex_spec(spec, path)
            .map_err(|e| format!("invalid Numaflow MonoVertex spec: {e}")),
        Kind::IsbService => child::validate_isbsvc_spec(spec, path)
            .map_err(|e| format!("invalid Numaflow InterStepBufferService spec: {e}")),
        Kind::NumaflowController => Ok(()),
    };
    res.map_err(|e| anyhow!("the controller would reject this manifest: {e}"))
}

/// The desired child for `live`, rendered as the controller renders it.
async fn desired_child(
    cluster: &Cluster,
    kind: Kind,
    manifest: &Value,
    live: &Value,
    notes: &mut Vec<String>,
) -> Result<RenderedChild> {
    let ns = str_at(live, "/metadata/namespace");
    let rollout = str_at(manifest, "/metadata/name");
    let child_name = str_at(live, "/metadata/name");
    if kind == Kind::NumaflowController {
        // The NumaflowController's spec is the rollout's {version, instanceID}; no labels.
        let mut spec = serde_json::Map::new();
        for key in ["version", "instanceID"] {
            if let Some(v) = manifest.pointer(&format!("/spec/controller/{key}")) {
                spec.insert(key.into(), v.clone());
            }
        }
        return Ok(RenderedChild {
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            spec: Value::Object(spec),
        });
    }
    let field = kind.template_field();
    let template = manifest
        .pointer(&format!("/spec/{field}"))
        .ok_or_else(|| anyhow!("the manifest has no spec.{field}"))?;
    let spec = template
        .get("spec")
        .ok_or_else(|| anyhow!("the manifest has no spec.{field}.spec"))?;
    validate(kind, spec)?;
    let metadata: Option<numaplane_api::common::ChildMetadata> = template
        .get("metadata")
        .map(|m| serde_json::from_value(m.clone()))
        .transpose()
        .with_context(|| format!("spec.{field}.metadata"))?;
    let annotation = |key: &str| {
        str_at(
            manifest,
            &format!("/metadata/annotations/{}", json_pointer_escape(key)),
        ) == "true"
    };
    // What the child takes from outside the rollout, read as the controller reads it.
    let (isb_rollout, isb_child, requests);
    let inputs = match kind {
        Kind::Pipeline => {
            isb_rollout = child::isb_rollout_name(spec);
            isb_child = match current_isbsvc(cluster, ns, &isb_rollout).await? {
                Some(c) => c,
                None => {
                    notes.push(format!(
                        "ISBServiceRollout {isb_rollout} has no InterStepBufferService: the controller would wait for it"
                    ));
                    str_at(
                        live,
                        &format!(
                            "/metadata/labels/{}",
                            json_pointer_escape(labels::ISBSVC_CHILD_NAME)
                        ),
                    )
                    .to_string()
                }
            };
            requests = pause_requests(cluster, ns, &isb_rollout).await?;
            KindInputs::Pipeline {
                isb_rollout: &isb_rollout,
                isb_child: &isb_child,
                pause_requests: &requests,
                allow_data_loss: annotation(numaplane_api::keys::annotations::ALLOW_DATA_LOSS),
            }
        }
        Kind::MonoVertex => KindInputs::MonoVertex {
            fast_resume: manifest
                .pointer("/spec/strategy/pauseResume/fastResume")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        },
        // (A NumaflowController's child was returned above.)
        Kind::IsbService | Kind::NumaflowController => KindInputs::IsbService,
    };
    let instance = placement(cluster, ns, kind, rollout).await?.instance;
    let live_annotations = string_map(live, "/metadata/annotations");
    let live_spec = live.get("spec").cloned().unwrap_or(Value::Null);
    let desired = desired::desired(&Inputs {
        rollout,
        namespace: ns,
        child: child_name,
        upgrade_state: upgrade_state::PROMOTED,
        metadata: metadata.as_ref(),
        template: spec,
        kind: inputs,
        instance: instance.as_deref(),
        live: Some(LiveChild {
            annotations: &live_annotations,
            spec: &live_spec,
            phase: str_at(live, "/status/phase"),
        }),
    })?;
    if let KindInputs::Pipeline { pause_requests, .. } = inputs
        && desired.spec.pointer("/lifecycle/desiredPhase")
            != spec.pointer("/lifecycle/desiredPhase")
    {
        notes.push(format!(
            "paused while {} asks its pipelines to pause: the controller keeps the pipeline paused until it is done",
            pause_requests.join(" and ")
        ));
    }
    Ok(desired)
}

/// The rollouts asking the pipelines of ISBServiceRollout `isb_rollout` in `ns` to pause: it,
/// and the namespace's NumaflowControllerRollouts, as the controller reads them.
async fn pause_requests(cluster: &Cluster, ns: &str, isb_rollout: &str) -> Result<Vec<String>> {
    let requesting = |r: &DynamicObject| {
        r.data
            .get("status")
            .and_then(|s| serde_json::from_value::<numaplane_api::common::Status>(s.clone()).ok())
            .is_some_and(|s| ppnd::requests_pause(&s))
    };
    let api = |kind: Kind| -> Api<DynamicObject> {
        Api::namespaced_with(cluster.client.clone(), ns, &kind.rollout_resource())
    };
    let mut out = Vec::new();
    let isb = api(Kind::IsbService)
        .get_opt(isb_rollout)
        .await
        .with_context(|| format!("reading ISBServiceRollout {isb_rollout}"))?;
    if isb.as_ref().is_some_and(requesting) {
        out.push(format!("ISBServiceRollout {isb_rollout}"));
    }
    let ncrs = list_or_empty(&api(Kind::NumaflowController), &ListParams::default())
        .await
        .context("reading the namespace's NumaflowControllerRollouts")?;
    out.extend(ncrs.iter().filter(|r| requesting(r)).map(|r| {
        format!(
            "NumaflowControllerRollout {}",
            r.metadata.name.as_deref().unwrap_or_default()
        )
    }));
    Ok(out)
}

/// Where the namespace's NumaflowControllerRollout places `rollout`'s child (the promoted
/// controller's instance, or a controller trial's), as the controller reads it.
async fn placement(
    cluster: &Cluster,
    ns: &str,
    kind: Kind,
    rollout: &str,
) -> Result<numaplane_core::controller_trial::Target> {
    use numaplane_core::controller_trial::target;
    let api: Api<DynamicObject> = Api::namespaced_with(
        cluster.client.clone(),
        ns,
        &Kind::NumaflowController.rollout_resource(),
    );
    let ncr = list_or_empty(&api, &ListParams::default())
        .await
        .context("reading the namespace's NumaflowControllerRollout")?
        .into_iter()
        .find(|r| r.metadata.deletion_timestamp.is_none());
    let status: Option<numaplane_api::numaflow_controller_rollout::ControllerProgressiveStatus> =
        ncr.as_ref()
            .and_then(|r| r.data.pointer("/status/progressiveStatus"))
            .map(|s| serde_json::from_value(s.clone()))
            .transpose()
            .context("status.progressiveStatus of the namespace's NumaflowControllerRollout")?;
    Ok(target(status.as_ref(), kind, rollout))
}

fn json_pointer_escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Rider changes between the manifest's riders (rendered for the live child) and the live
/// riders listed in the rollout's `status.riders`.
async fn rider_changes(
    cluster: &Cluster,
    kind: Kind,
    manifest: &Value,
    live_rollout: &Value,
    live_child: &Value,
    desired_spec: &Value,
    rules: &numaplane_core::riders::RiderRules,
) -> Result<Vec<usde::RiderChange>> {
    let specs: Vec<RiderSpec> = manifest
        .pointer("/spec/riders")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|r| RiderSpec {
            definition: r.get("definition").cloned().unwrap_or(Value::Null),
            progressive: r.get("progressive").and_then(Value::as_bool) == Some(true),
            per_vertex: r.get("perVertex").and_then(Value::as_bool) == Some(true),
        })
        .collect();
    let ns = str_at(live_child, "/metadata/namespace");
    let child_name = str_at(live_child, "/metadata/name");
    let vertices: Vec<String> = desired_spec
        .get("vertices")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.get("name").and_then(Value::as_str).map(String::from))
        .collect();
    let desired = numaplane_core::riders::desired_riders(
        &specs,
        child_name,
        ns,
        |vertex| match vertex {
            Some(v) => TemplateVars::pipeline_vertex(child_name, ns, v),
            None => TemplateVars::for_child(kind, child_name, ns),
        },
        &vertices,
        rules,
    )
    .map_err(|e| anyhow!("the controller would reject this manifest: {e}"))?;
    let mut existing = Vec::new();
    let listed: Vec<numaplane_api::common::RiderStatus> = live_rollout
        .pointer("/status/riders")
        .map(|r| serde_json::from_value(r.clone()))
        .transpose()
        .context("status.riders")?
        .unwrap_or_default();
    for r in listed {
        let gvk = kube::core::GroupVersionKind::gvk(
            &r.group_version_kind.group,
            &r.group_version_kind.version,
            &r.group_version_kind.kind,
        );
        let Ok((resource, _)) = kube::discovery::pinned_kind(&cluster.client, &gvk).await else {
            continue; // a kind the server no longer serves: nothing to compare
        };
        let api: Api<DynamicObject> = Api::namespaced_with(cluster.client.clone(), ns, &resource);
        // A missing live rider is skipped, as the controller does.
        if let Some(obj) = api.get_opt(&r.name).await? {
            let mut value = serde_json::to_value(&obj)?;
            value["apiVersion"] = Value::String(resource.api_version.clone());
            value["kind"] = Value::String(resource.kind.clone());
            if let Some(e) = ExistingRider::from_object(&value) {
                existing.push(e);
            }
        }
    }
    let diff = numaplane_core::riders::diff_riders(&desired, &existing);
    Ok(usde::rider_changes(&diff))
}

/// Works out the plan for one rollout manifest (read from `origin`); reads only.
pub async fn plan(
    cluster: &Cluster,
    args: &PlanArgs,
    origin: &str,
    manifest: &Value,
) -> Result<Plan> {
    let kind_str = str_at(manifest, "/kind");
    let kind = Kind::parse_resource(kind_str).ok_or_else(|| not_a_rollout(origin, kind_str))?;
    let name = str_at(manifest, "/metadata/name");
    if name.is_empty() {
        bail!("{origin}: metadata.name is missing");
    }
    let ns = match str_at(manifest, "/metadata/namespace") {
        "" => cluster.namespace.clone(),
        ns => ns.to_string(),
    };
    let st = strategies(cluster, &ns, &args.controller_namespace).await?;
    let mut notes = st.notes;
    let mut out = Plan {
        kind: kind.rollout_kind().to_string(),
        name: name.to_string(),
        namespace: ns.clone(),
        user_strategy: st.user.as_str().to_string(),
        user_strategy_source: st.source,
        live_child: None,
        strategy: "create".into(),
        recreate: false,
        fields: Vec::new(),
        notes: Vec::new(),
    };
    let rollouts: Api<DynamicObject> =
        Api::namespaced_with(cluster.client.clone(), &ns, &kind.rollout_resource());
    let Some(live_rollout) = rollouts
        .get_opt(name)
        .await
        .with_context(|| format!("getting {} {name}", kind.rollout_kind()))?
    else {
        notes.push(format!(
            "{} {name} does not exist in namespace {ns}: applying creates it and its first {}",
            kind.rollout_kind(),
            kind.child_kind()
        ));
        out.notes = notes;
        return Ok(out);
    };
    let live_rollout = serde_json::to_value(&live_rollout)?;
    // After a progressive controller upgrade the promoted NumaflowController is a trial's.
    let child_name = match str_at(
        &live_rollout,
        "/status/progressiveStatus/promotedControllerStatus/name",
    ) {
        "" => name,
        promoted => promoted,
    };
    let Some(live) = live_child(cluster, &ns, kind, child_name).await? else {
        notes.push(format!(
            "{} {name} has no promoted {}: the controller creates one",
            kind.rollout_kind(),
            kind.child_kind()
        ));
        out.notes = notes;
        return Ok(out);
    };
    out.live_child = Some(format!(
        "{}/{}",
        kind.child_kind(),
        str_at(&live, "/metadata/name")
    ));
    if kind == Kind::NumaflowController
        && st.user == UserStrategy::Progressive
        && manifest.pointer("/spec/strategy/progressive").is_some()
    {
        let (from, to) = (
            str_at(&live, "/spec/version"),
            str_at(manifest, "/spec/controller/version"),
        );
        if from != to {
            notes.push(controller_trial_note(cluster, &ns, manifest, from, to).await?);
            out.strategy = strategy_name(UpgradeStrategy::Progressive).to_string();
            out.fields = vec![PlanField {
                path: "spec.controller.version".into(),
                class: class_name(ChangeClass::Progressive).to_string(),
            }];
            out.notes = notes;
            return Ok(out);
        }
    }
    let desired = desired_child(cluster, kind, manifest, &live, &mut notes).await?;
    let riders = if kind == Kind::NumaflowController {
        Vec::new()
    } else {
        rider_changes(
            cluster,
            kind,
            manifest,
            &live_rollout,
            &live,
            &desired.spec,
            &st.controller.permitted_riders,
        )
        .await?
    };
    let no_labels = BTreeMap::new();
    let ncr = kind == Kind::NumaflowController;
    let live_labels = if ncr {
        no_labels.clone()
    } else {
        string_map(&live, "/metadata/labels")
    };
    let live_annotations = if ncr {
        no_labels.clone()
    } else {
        string_map(&live, "/metadata/annotations")
    };
    let live_spec = live.get("spec").cloned().unwrap_or(Value::Null);
    let decision = usde::decide(&DecisionInput {
        user_strategy: st.user,
        config: st.usde.as_ref().map(|u| u.for_kind(kind)),
        desired_spec: &desired.spec,
        live_spec: &live_spec,
        desired_labels: &desired.labels,
        live_labels: &live_labels,
        desired_annotations: &desired.annotations,
        live_annotations: &live_annotations,
        riders: &riders,
    });
    let raw = decision.strategy;
    let decision = usde::effective_for_kind(kind, decision);
    if raw != decision.strategy {
        notes.push(format!(
            "{} would be {} under {}, but {}s do not support it: applied directly",
            kind.child_kind(),
            strategy_name(raw),
            st.user.as_str(),
            kind.child_kind()
        ));
    }
    if decision.recreate && kind != Kind::IsbService {
        notes.push(format!(
            "a recreate field changed; only ISBServiceRollouts recreate their child, a {} is updated in place",
            kind.child_kind()
        ));
    }
    let in_progress = str_at(&live_rollout, "/status/upgradeInProgress");
    if !in_progress.is_empty() {
        notes.push(format!(
            "an upgrade is already in progress (status.upgradeInProgress {in_progress}): it continues with this change and decides how it is carried"
        ));
    }
    if kind == Kind::Pipeline
        && decision.strategy == UpgradeStrategy::PipelinePauseAndDrain
        && live_rollout
            .pointer(&format!(
                "/metadata/annotations/{}",
                json_pointer_escape(numaplane_api::keys::annotations::ALLOW_DATA_LOSS)
            ))
            .and_then(Value::as_str)
            == Some("true")
    {
        notes.push(format!(
            "the rollout has {}: \"true\": the update does not wait for the pipeline to pause",
            numaplane_api::keys::annotations::ALLOW_DATA_LOSS
        ));
    }
    out.strategy = strategy_name(decision.strategy).to_string();
    out.recreate = decision.recreate;
    out.fields = decision
        .reasons
        .iter()
        .map(|r| PlanField {
            path: r.path.clone(),
            class: class_name(r.class).to_string(),
        })
        .collect();
    out.notes = notes;
    Ok(out)
}

/// What a progressive Numaflow controller upgrade from `from` to `to` will carry: every
/// workload rollout of the namespace, an ISB service with the pipelines on it.
async fn controller_trial_note(
    cluster: &Cluster,
    ns: &str,
    manifest: &Value,
    from: &str,
    to: &str,
) -> Result<String> {
    let names = |kind: Kind| {
        let api: Api<DynamicObject> =
            Api::namespaced_with(cluster.client.clone(), ns, &kind.rollout_resource());
        async move {
            let items = list_or_empty(&api, &ListParams::default()).await?;
            let mut v: Vec<Value> = items
                .into_iter()
                .filter_map(|o| serde_json::to_value(o).ok())
                .collect();
            v.sort_by(|a, b| str_at(a, "/metadata/name").cmp(str_at(b, "/metadata/name")));
            anyhow::Ok(v)
        }
    };
    let isbs = names(Kind::IsbService).await?;
    let prs = names(Kind::Pipeline).await?;
    let mvs = names(Kind::MonoVertex).await?;
    let mut groups: Vec<String> = isbs
        .iter()
        .map(|i| {
            let isb = str_at(i, "/metadata/name");
            let on: Vec<&str> = prs
                .iter()
                .filter(|p| {
                    numaplane_core::child::isb_rollout_name(
                        p.pointer("/spec/pipeline/spec").unwrap_or(&Value::Null),
                    ) == isb
                })
                .map(|p| str_at(p, "/metadata/name"))
                .collect();
            if on.is_empty() {
                format!("ISBServiceRollout {isb}")
            } else {
                format!(
                    "ISBServiceRollout {isb} with PipelineRollouts {}",
                    on.join(", ")
                )
            }
        })
        .collect();
    groups.extend(
        mvs.iter()
            .map(|m| format!("MonoVertexRollout {}", str_at(m, "/metadata/name"))),
    );
    let parallel = manifest
        .pointer("/spec/strategy/progressive/maxParallel")
        .and_then(Value::as_i64)
        .unwrap_or(numaplane_core::controller_trial::DEFAULT_MAX_PARALLEL as i64);
    let carried = if groups.is_empty() {
        "no workload rollouts (the trial is judged on its Deployment alone)".to_string()
    } else {
        format!("{} ({parallel} at a time)", groups.join("; "))
    };
    Ok(format!(
        "a progressive Numaflow controller upgrade from {from} to {to}: a trial NumaflowController on its own instance beside the promoted one, carrying {carried}; all are promoted if every trial passes, else everything stays on {from}"
    ))
}

/// The plan as text.
pub fn render_text(p: &Plan) -> String {
    let mut s = format!("{}/{} in namespace {}\n", p.kind, p.name, p.namespace);
    s.push_str(&format!(
        "  namespace strategy: {} (from {})\n",
        p.user_strategy, p.user_strategy_source
    ));
    if let Some(c) = &p.live_child {
        s.push_str(&format!("  live child: {c}\n"));
    }
    let recreate = if p.recreate { " (+ recreate)" } else { "" };
    s.push_str(&format!("strategy: {}{recreate}\n", p.strategy));
    if !p.fields.is_empty() {
        s.push_str("decided by:\n");
        let width = p.fields.iter().map(|f| f.path.len()).max().unwrap_or(0);
        for f in &p.fields {
            s.push_str(&format!("  {:width$}  {}\n", f.path, f.class));
        }
    }
    for n in &p.notes {
        s.push_str(&format!("note: {n}\n"));
    }
    s
}

fn not_a_rollout(origin: &str, kind: &str) -> anyhow::Error {
    anyhow!(
        "{origin}: kind {kind:?} is not a Numaplane rollout (PipelineRollout, MonoVertexRollout, ISBServiceRollout or NumaflowControllerRollout)"
    )
}

/// A document that was not planned because it is no rollout.
#[derive(Debug, Serialize)]
pub struct NotPlanned {
    pub origin: String,
    pub object: String,
    /// The object's kind, for the error when nothing else was planned.
    #[serde(skip)]
    pub kind: String,
}

/// A document that could not be read or planned.
#[derive(Debug, Serialize)]
pub struct PlanError {
    pub origin: String,
    pub message: String,
}

/// The error and its causes, one per line, without repeated parts.
fn causes(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if parts.last().is_none_or(|p| !p.contains(&text)) {
            parts.push(text);
        }
    }
    parts.join("\n")
}

/// Prints an error on its own lines: `error: ` and the first, the rest indented.
fn print_error(message: &str) {
    let mut lines = message.lines();
    eprintln!("error: {}", lines.next().unwrap_or_default());
    for line in lines {
        eprintln!("  {line}");
    }
}

/// Plans every rollout of the `-f` sources (files, directories, `-`), lists the other objects
/// as not planned, and reports each unreadable or failing document on its own lines; exit code
/// 1 if any document failed or none was a rollout.
pub async fn run(cluster: &Cluster, args: &PlanArgs) -> Result<i32> {
    let mut plans = Vec::new();
    let mut not_planned = Vec::new();
    let mut errors = Vec::new();
    for doc in manifests::read(&args.file, args.recursive) {
        let origin = doc.origin;
        let manifest = match doc.parsed {
            Ok(m) => m,
            Err(message) => {
                errors.push(PlanError { origin, message });
                continue;
            }
        };
        let kind = str_at(&manifest, "/kind");
        if kind.is_empty() {
            errors.push(PlanError {
                message: format!("{origin}: no kind: expected a rollout manifest"),
                origin,
            });
            continue;
        }
        if Kind::parse_resource(kind).is_none() {
            not_planned.push(NotPlanned {
                object: format!("{kind}/{}", str_at(&manifest, "/metadata/name")),
                kind: kind.to_string(),
                origin,
            });
            continue;
        }
        match plan(cluster, args, &origin, &manifest).await {
            Ok(p) => plans.push(p),
            Err(e) => {
                let message = causes(&e);
                let message = if message.starts_with(&origin) {
                    message
                } else {
                    format!("{origin}: {message}")
                };
                errors.push(PlanError { origin, message });
            }
        }
    }
    if plans.is_empty() && errors.is_empty() {
        // Nothing to plan at all: each object that is no rollout is the error.
        for n in not_planned.drain(..) {
            errors.push(PlanError {
                message: not_a_rollout(&n.origin, &n.kind).to_string(),
                origin: n.origin,
            });
        }
        if errors.is_empty() {
            errors.push(PlanError {
                origin: String::new(),
                message: "no objects passed to plan".into(),
            });
        }
    }
    match args.output {
        PlanOutput::Text => {
            let text: Vec<String> = plans.iter().map(render_text).collect();
            print!("{}", text.join("\n"));
            for n in &not_planned {
                println!(
                    "not planned: {} ({}): not a Numaplane rollout",
                    n.object, n.origin
                );
            }
        }
        PlanOutput::Json if plans.len() == 1 && not_planned.is_empty() && errors.is_empty() => {
            println!("{}", serde_json::to_string_pretty(&plans[0])?);
        }
        PlanOutput::Json => println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "plans": plans, "notPlanned": not_planned, "errors": errors,
            }))?
        ),
    }
    for e in &errors {
        print_error(&e.message);
    }
    Ok(if errors.is_empty() { super::EXIT_OK } else { 1 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text() {
        let p = Plan {
            kind: "PipelineRollout".into(),
            name: "p".into(),
            namespace: "ns".into(),
            user_strategy: "pause-and-drain".into(),
            user_strategy_source: "ConfigMap ns/c (upgradeStrategy)".into(),
            live_child: Some("Pipeline/p-0".into()),
            strategy: "pause-and-drain".into(),
            recreate: false,
            fields: vec![PlanField {
                path: "spec.vertices.udf.container.image".into(),
                class: "dataLoss".into(),
            }],
            notes: vec![],
        };
        assert_eq!(
            render_text(&p),
            "PipelineRollout/p in namespace ns\n  namespace strategy: pause-and-drain (from ConfigMap ns/c (upgradeStrategy))\n  live child: Pipeline/p-0\nstrategy: pause-and-drain\ndecided by:\n  spec.vertices.udf.container.image  dataLoss\n"
        );
    }
}
