//! Connecting like kubectl, and finding rollouts by name.

use crate::cli::GlobalArgs;
use anyhow::{Context, Result, anyhow, bail};
use kube::api::{Api, DynamicObject, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use numaplane_api::Kind;

/// Field manager of every write the plugin makes.
pub const FIELD_MANAGER: &str = "kubectl-numaplane";

/// A client and the namespace commands act in.
pub struct Cluster {
    pub client: Client,
    pub namespace: String,
}

impl Cluster {
    /// Kubeconfig from `--kubeconfig`, else `$KUBECONFIG`/`~/.kube/config`, else in-cluster;
    /// context from `--context`, else the current one; namespace from `-n`, else the context's.
    pub async fn connect(args: &GlobalArgs) -> Result<Self> {
        let options = KubeConfigOptions {
            context: args.context.clone(),
            cluster: args.cluster.clone(),
            user: args.user.clone(),
        };
        let config = if let Some(path) = &args.kubeconfig {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .with_context(|| format!("loading kubeconfig {}", path.display()))?
        } else if args.context.is_some() || args.cluster.is_some() || args.user.is_some() {
            Config::from_kubeconfig(&options)
                .await
                .context("loading kubeconfig")?
        } else {
            Config::infer()
                .await
                .context("no cluster configured (kubeconfig or in-cluster)")?
        };
        let config = with_overrides(config, args)?;
        let namespace = args
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        let client = Client::try_from(config).context("creating the Kubernetes client")?;
        Ok(Cluster { client, namespace })
    }

    pub fn rollouts(&self, kind: Kind) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.client.clone(),
            &self.namespace,
            &kind.rollout_resource(),
        )
    }

    /// Finds the rollout `name` among `kinds` (or exactly `wanted`). Errors when it is missing or
    /// when several kinds have a rollout of that name.
    pub async fn find(
        &self,
        name: &str,
        kinds: &[Kind],
        wanted: Option<Kind>,
    ) -> Result<(Kind, DynamicObject)> {
        let candidates: Vec<Kind> = match wanted {
            Some(k) => vec![k],
            None => kinds.to_vec(),
        };
        let mut found = Vec::new();
        for kind in candidates {
            if let Some(obj) = self
                .rollouts(kind)
                .get_opt(name)
                .await
                .with_context(|| format!("getting {} {name}", kind.rollout_kind()))?
            {
                found.push((kind, obj));
            }
        }
        match found.len() {
            0 => {
                let kinds: Vec<&str> = match wanted {
                    Some(k) => vec![k.rollout_kind()],
                    None => kinds.iter().map(|k| k.rollout_kind()).collect(),
                };
                Err(anyhow!(
                    "no {} named {name:?} in namespace {}",
                    kinds.join(" or "),
                    self.namespace
                ))
            }
            1 => Ok(found.remove(0)),
            _ => {
                let kinds: Vec<&str> = found.iter().map(|(k, _)| k.rollout_kind()).collect();
                bail!(
                    "{name:?} names a {} in namespace {}: choose one with --kind",
                    kinds.join(" and a "),
                    self.namespace
                )
            }
        }
    }
}

/// kubectl's connection and authentication flags, over what the kubeconfig says.
fn with_overrides(mut config: Config, args: &GlobalArgs) -> Result<Config> {
    if let Some(server) = &args.server {
        config.cluster_url = server
            .parse()
            .with_context(|| format!("--server {server:?} is not a URL"))?;
    }
    if let Some(token) = &args.token {
        let auth = &mut config.auth_info;
        auth.token = Some(token.clone().into());
        auth.token_file = None;
        auth.username = None;
        auth.password = None;
        auth.exec = None;
        auth.auth_provider = None;
    }
    if let Some(user) = &args.as_user {
        config.auth_info.impersonate = Some(user.clone());
    }
    if !args.as_group.is_empty() {
        if args.as_user.is_none() {
            bail!("--as-group needs --as");
        }
        config.auth_info.impersonate_groups = Some(args.as_group.clone());
    }
    if let Some(t) = args.request_timeout {
        let limit = (!t.is_zero()).then_some(t);
        config.connect_timeout = limit;
        config.read_timeout = limit;
        config.write_timeout = limit;
    }
    if args.insecure_skip_tls_verify {
        config.accept_invalid_certs = true;
    }
    Ok(config)
}

/// Lists objects, treating a missing resource type (CRD not installed) as empty.
pub async fn list_or_empty(
    api: &Api<DynamicObject>,
    params: &ListParams,
) -> Result<Vec<DynamicObject>> {
    match api.list(params).await {
        Ok(list) => Ok(list.items),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(Vec::new()),
        Err(e) => Err(e.into()),
    }
}
