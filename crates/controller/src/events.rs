//! Kubernetes Events, one aggregating recorder per reference event source (so a failing object
//! produces one Event series, not a storm).

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use numaplane_api::{Reconciled, Subject};
use std::collections::HashMap;
use std::sync::Arc;
use tracing::debug;

/// Event sources (reporting controllers) beside those of the reconciled kinds
/// ([`numaplane_api::Subject::event_source`]).
pub mod source {
    /// Configuration problems not tied to one rollout.
    pub const NUMAPLANE: &str = "numaplane";
}

#[derive(Clone)]
pub struct EventSink {
    recorders: Arc<HashMap<&'static str, Recorder>>,
    client: Client,
    instance: Option<String>,
}

impl EventSink {
    pub fn new(client: Client, instance: Option<String>) -> Self {
        let recorders = Subject::ALL
            .map(Subject::event_source)
            .into_iter()
            .chain([source::NUMAPLANE])
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
    pub async fn write_refused<K: kube::Resource<DynamicType = ()> + Reconciled>(
        &self,
        obj: &K,
        reason: &str,
        note: String,
    ) {
        self.publish(
            K::SUBJECT.event_source(),
            &obj.object_ref(&()),
            EventType::Warning,
            reason,
            note,
        )
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
