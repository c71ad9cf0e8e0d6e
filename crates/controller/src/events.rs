//! Kubernetes Events, one aggregating recorder per reference event source (so a failing object
//! produces one Event series, not a storm).

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use std::collections::HashMap;
use std::sync::Arc;
use tracing::debug;

/// Event sources (reporting controllers) as the reference names them.
pub mod source {
    pub const PIPELINE_ROLLOUT: &str = "pipeline-rollout";
    pub const MONOVERTEX_ROLLOUT: &str = "monovertex-rollout";
    pub const ISBSVC_ROLLOUT: &str = "isbsvc-rollout";
    pub const NUMAFLOW_CONTROLLER_ROLLOUT: &str = "numaflow-controller-rollout";
    pub const NUMAFLOW_CONTROLLER: &str = "numaflow-controller";
    /// Configuration problems not tied to one rollout.
    pub const NUMAPLANE: &str = "numaplane";

    /// The source of Events about an object of `kind`.
    pub fn of_kind(kind: &str) -> Option<&'static str> {
        Some(match kind {
            "PipelineRollout" => PIPELINE_ROLLOUT,
            "MonoVertexRollout" => MONOVERTEX_ROLLOUT,
            "ISBServiceRollout" => ISBSVC_ROLLOUT,
            "NumaflowControllerRollout" => NUMAFLOW_CONTROLLER_ROLLOUT,
            "NumaflowController" => NUMAFLOW_CONTROLLER,
            _ => return None,
        })
    }
}

#[derive(Clone)]
pub struct EventSink {
    recorders: Arc<HashMap<&'static str, Recorder>>,
    client: Client,
    instance: Option<String>,
}

impl EventSink {
    pub fn new(client: Client, instance: Option<String>) -> Self {
        let recorders = [
            source::PIPELINE_ROLLOUT,
            source::MONOVERTEX_ROLLOUT,
            source::ISBSVC_ROLLOUT,
            source::NUMAFLOW_CONTROLLER_ROLLOUT,
            source::NUMAFLOW_CONTROLLER,
            source::NUMAPLANE,
        ]
        .into_iter()
        .map(|s| {
            let reporter = Reporter {
                controller: s.to_string(),
                instance: instance.clone(),
            };
            (s, Recorder::new(client.clone(), reporter))
        })
        .collect();
        Self {
            recorders: Arc::new(recorders),
            client,
            instance,
        }
    }

    /// Publishes an Event that happens once per object (a child's creation) without the
    /// recorder's aggregation cache, which would keep a copy of every such Event for six minutes
    /// (3 MiB at 1,000 rollouts) to aggregate repeats that cannot come. Same fields and naming as
    /// the recorder's.
    pub async fn publish_once(
        &self,
        source: &'static str,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        let now = Timestamp::now();
        let ev = K8sEvent {
            action: Some(reason.to_string()),
            reason: Some(reason.to_string()),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            note: Some(truncate(note)),
            metadata: ObjectMeta {
                namespace: regarding.namespace.clone(),
                name: Some(format!(
                    "{}.{:x}",
                    regarding.name.as_deref().unwrap_or(source),
                    now.as_nanosecond()
                )),
                ..Default::default()
            },
            reporting_controller: Some(source.to_string()),
            reporting_instance: Some(self.instance.clone().unwrap_or_else(|| source.to_string())),
            type_: Some(
                match type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .to_string(),
            ),
            ..Default::default()
        };
        let ns = regarding.namespace.as_deref().unwrap_or("default");
        let api: Api<K8sEvent> = Api::namespaced(self.client.clone(), ns);
        if let Err(e) = api.create(&PostParams::default(), &ev).await {
            debug!(error = %e, reason, "could not publish Event");
        }
    }

    /// Publishes an Event; failures are logged, never propagated (Events are best effort).
    pub async fn publish(
        &self,
        source: &'static str,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        let Some(rec) = self.recorders.get(source) else {
            return;
        };
        let ev = Event {
            type_,
            reason: reason.to_string(),
            note: Some(truncate(note)),
            action: reason.to_string(),
            secondary: None,
        };
        if let Err(e) = rec.publish(&ev, regarding).await {
            debug!(error = %e, reason, "could not publish Event");
        }
    }

    /// The reference's Warning for a write of Numaplane's own object that the API server refused
    /// (`UpdateStatusFailed`, `UpdateFailed`…), from the source of the object's kind.
    pub async fn write_refused<K: kube::Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        reason: &str,
        note: String,
    ) {
        let Some(src) = source::of_kind(&K::kind(&())) else {
            return;
        };
        self.publish(src, &obj.object_ref(&()), EventType::Warning, reason, note)
            .await;
    }

    pub async fn config_warning(&self, namespace: &str, configmap: &str, note: &str) {
        self.config_event(namespace, configmap, "InvalidConfig", note)
            .await;
    }

    /// A Warning Event about configuration ConfigMap `namespace/configmap`, with `reason`.
    pub async fn config_event(&self, namespace: &str, configmap: &str, reason: &str, note: &str) {
        let regarding = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("ConfigMap".into()),
            name: Some(configmap.to_string()),
            namespace: Some(namespace.to_string()),
            ..Default::default()
        };
        self.publish(
            source::NUMAPLANE,
            &regarding,
            EventType::Warning,
            reason,
            note.to_string(),
        )
        .await;
    }
}

/// Event notes are limited to 1 kB by the API server.
fn truncate(mut s: String) -> String {
    const MAX: usize = 1000;
    if s.len() > MAX {
        let mut cut = MAX;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push('…');
    }
    s
}
