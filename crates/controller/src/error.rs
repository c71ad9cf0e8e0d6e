//! Errors of a reconcile pass. Every variant has a short, stable reason used for the status
//! message prefix, the Kubernetes Event and the metric label.

use numaplane_core::{riders::RiderError, template::TemplateError};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The user's child spec is not what Numaflow accepts.
    #[error("{0}")]
    InvalidSpec(String),
    #[error("templating: {0}")]
    Template(#[from] TemplateError),
    #[error("{0}")]
    Rider(#[from] RiderError),
    #[error("{kind} {name} already exists in namespace {namespace}, not owned by a {owner_kind}")]
    NotOwned {
        kind: &'static str,
        name: String,
        namespace: String,
        owner_kind: &'static str,
    },
    /// The reference's words, after the field that names it.
    #[error("spec.pipeline.spec.interStepBufferServiceName: unable to find ISBServiceRollout {0}")]
    MissingIsbServiceRollout(String),
    #[error("{context}: {source}")]
    Kube {
        context: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("configuration: {0}")]
    Config(String),
    #[error("not the leader: this replica holds no lease and must not write")]
    NotLeader,
    /// An object of that name exists that Numaplane doesn't own: it is neither overwritten
    /// nor deleted. `owner` says whose it would have been (`NumaflowController x`).
    #[error(
        "{kind} {name} exists in namespace {namespace} and is not owned by {owner}: Numaplane neither overwrites nor deletes it"
    )]
    NotOwnedObject {
        kind: String,
        name: String,
        namespace: String,
        owner: String,
    },
    /// An object of that name still carries the owner reference of an earlier child of the same
    /// name (deleted, so a new child took its name): Kubernetes' garbage collector deletes it
    /// soon, so the pass waits instead of failing.
    #[error(
        "{kind} {name} in namespace {namespace} belongs to an earlier {owner} (uid {earlier_uid}, deleted): waiting for the garbage collector to delete it"
    )]
    AwaitingCollection {
        kind: String,
        name: String,
        namespace: String,
        owner: String,
        earlier_uid: String,
    },
    /// No Numaflow controller definition for a NumaflowController's version.
    #[error(
        "no controller definition found for version {version:?} (searched namespaces: {}){}",
        searched.join(", "),
        ignored_note(ignored)
    )]
    MissingDefinition {
        version: String,
        searched: Vec<String>,
        /// Untrusted namespaces that define the version.
        ignored: Vec<String>,
    },
    /// A Numaflow controller definition that can't be rendered.
    #[error("controller definition for version {version:?}: {problem}")]
    InvalidDefinition { version: String, problem: String },
}

impl Error {
    pub fn reason(&self) -> &'static str {
        match self {
            Error::InvalidSpec(_) => "InvalidSpec",
            Error::Template(_) => "TemplateError",
            Error::Rider(e) => e.reason(),
            Error::NotOwned { .. } | Error::NotOwnedObject { .. } => "NotOwned",
            Error::AwaitingCollection { .. } => "AwaitingGarbageCollection",
            Error::MissingIsbServiceRollout(_) => "MissingISBServiceRollout",
            Error::Kube { .. } => "KubernetesAPIError",
            Error::Config(_) => "ConfigError",
            Error::NotLeader => "NotLeader",
            Error::MissingDefinition { .. } => "MissingDefinition",
            Error::InvalidDefinition { .. } => "InvalidDefinition",
        }
    }

    /// Whether retrying without a change can help (API errors) or the user must act.
    pub fn is_transient(&self) -> bool {
        matches!(self, Error::Kube { .. } | Error::NotLeader)
    }

    /// Not a failure: something the cluster finishes on its own is awaited (reported as
    /// Pending, looked at again soon).
    pub fn is_wait(&self) -> bool {
        matches!(self, Error::AwaitingCollection { .. })
    }

    /// An API answer of 404: the object is gone.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::Kube { source, .. } if is_not_found(source))
    }
}

fn ignored_note(ignored: &[String]) -> String {
    if ignored.is_empty() {
        return String::new();
    }
    format!(
        "; ignored the definitions in namespace {}: only the operator's namespace and those listed in numaflowControllerDefinitionsNamespaces are trusted",
        ignored.join(", ")
    )
}

/// Attaches what was being done to a kube error.
pub trait KubeContext<T> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T, Error>;
}

impl<T> KubeContext<T> for Result<T, kube::Error> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T, Error> {
        self.map_err(|source| Error::Kube {
            context: context(),
            source: Box::new(source),
        })
    }
}

/// Whether a later attempt of the same request may succeed: the API server answered 5xx or 429,
/// or could not be reached (a restart, an overloaded control plane).
pub fn is_transient_api(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 429 || s.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

/// Whether a kube error is a 404.
pub fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// Whether a kube error is a 409 AlreadyExists/Conflict.
pub fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}
