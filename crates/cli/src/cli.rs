//! Command-line definitions.

use clap::{Args, Parser, Subcommand, ValueEnum};
use numaplane_api::Kind;
use std::path::PathBuf;
use std::time::Duration;

pub const EXIT_CODES: &str = "\
Exit codes:
  0  success (for wait: the rollout reached the state)
  1  error: rollout not found, command refused, API error, or (wait) the rollout is Failed
     or its progressive upgrade failed
  2  invalid command line
  3  wait timed out (the blocking reason is printed)";

/// kubectl plugin for Numaplane rollouts: see them at a glance or in a live web dashboard, pause,
/// resume, promote, abort and retry them, read their upgrade history, plan a change, and wait for them
/// in CI.
#[derive(Parser, Debug)]
#[command(name = "kubectl-numaplane", bin_name = "kubectl numaplane", version, after_help = EXIT_CODES)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Cluster selection, as in kubectl.
#[derive(Args, Debug, Clone, Default)]
pub struct GlobalArgs {
    /// Path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster).
    #[arg(long, global = true, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: the current context).
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// Namespace (default: the context's namespace, then "default").
    #[arg(short = 'n', long, global = true, value_name = "NS")]
    pub namespace: Option<String>,
    /// The kubeconfig cluster to use (default: the context's).
    #[arg(long, global = true, value_name = "NAME")]
    pub cluster: Option<String>,
    /// The kubeconfig user to use (default: the context's).
    #[arg(long, global = true, value_name = "NAME")]
    pub user: Option<String>,
    /// The API server's address, instead of the cluster's.
    #[arg(short = 's', long, global = true, value_name = "URL")]
    pub server: Option<String>,
    /// Bearer token for the API server, instead of the user's credentials.
    #[arg(long, global = true, value_name = "TOKEN")]
    pub token: Option<String>,
    /// Act as this user (impersonation; your credentials must allow it).
    #[arg(long = "as", global = true, value_name = "USER")]
    pub as_user: Option<String>,
    /// Act with this group too (repeatable; with --as).
    #[arg(long = "as-group", global = true, value_name = "GROUP")]
    pub as_group: Vec<String>,
    /// How long to wait for one request (0: no limit), e.g. 30s or 1m.
    #[arg(long, global = true, value_name = "DURATION", value_parser = parse_duration_or_zero)]
    pub request_timeout: Option<Duration>,
    /// Do not verify the API server's certificate (insecure).
    #[arg(long, global = true)]
    pub insecure_skip_tls_verify: bool,
}

/// [`parse_duration`], or `0` (with or without a unit) for "no limit" (`Duration::ZERO`).
pub fn parse_duration_or_zero(s: &str) -> Result<Duration, String> {
    if s.trim().trim_end_matches(|c: char| c.is_ascii_alphabetic()) == "0" {
        return Ok(Duration::ZERO);
    }
    parse_duration(s)
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Show rollouts as trees: rollout → children (Pipelines, MonoVertices, ...) → AnalysisRuns,
    /// riders and pause state.
    #[command(after_help = EXIT_CODES)]
    Get(GetArgs),
    /// One line per rollout: kind, name, phase, upgrade in progress, trial, health, age and
    /// status message, read from the rollouts alone. With -w, a line for each rollout that
    /// changes.
    #[command(after_help = EXIT_CODES)]
    List(ListArgs),
    /// Pause a PipelineRollout or MonoVertexRollout (sets
    /// spec.<pipeline|monoVertex>.spec.lifecycle.desiredPhase: Paused).
    #[command(after_help = EXIT_CODES)]
    Pause(PauseArgs),
    /// Resume a paused PipelineRollout or MonoVertexRollout (desiredPhase: Running).
    #[command(after_help = EXIT_CODES)]
    Resume(ResumeArgs),
    /// Let pause-and-drain upgrades of a PipelineRollout proceed without waiting for the pipeline
    /// to pause (annotation numaplane.numaproj.io/allow-data-loss: "true").
    #[command(after_help = EXIT_CODES)]
    AllowDataLoss(AllowDataLossArgs),
    /// Wait until a rollout is deployed, healthy or has promoted its trial (for CI); prints what
    /// blocks it on timeout.
    #[command(after_help = EXIT_CODES)]
    Wait(WaitArgs),
    /// Force-promote the trial child of a progressive upgrade now, even after a failed
    /// assessment (label numaplane.numaproj.io/force-promote: "true" on the trial child).
    #[command(after_help = EXIT_CODES)]
    Promote(TrialArgs),
    /// End a progressive upgrade now as a failure (label numaplane.numaproj.io/abort: "true" on
    /// the trial child): the trial is scaled to zero like a failed one (drained when replaced),
    /// the promoted child gets its scale back, and the rollout stays on the promoted child until
    /// its spec changes again. A later force-promote still wins.
    #[command(after_help = EXIT_CODES)]
    Abort(TrialArgs),
    /// Re-run a failed or aborted progressive upgrade without editing the spec (label
    /// numaplane.numaproj.io/retry: "true" on the failed trial child): the failed trial is
    /// replaced by a new trial of the same spec, assessed from the start; the failed one is
    /// drained and deleted like any replaced trial.
    #[command(after_help = EXIT_CODES)]
    Retry(TrialArgs),
    /// Show the last upgrade attempts of a rollout (status.upgradeHistory, oldest first): the
    /// child each made, its strategy, when, how long, how it ended and why, and the fields that
    /// started it.
    #[command(after_help = EXIT_CODES)]
    History(HistoryArgs),
    /// Show which upgrade strategy applying an edited rollout manifest would trigger in its
    /// namespace, and which fields decide it. Reads the live rollout, child and configuration;
    /// writes nothing.
    #[command(after_help = PLAN_HELP)]
    Plan(PlanArgs),
    /// Serve a live web dashboard on this machine: every rollout you can list (all namespaces,
    /// or -n), each rollout's children, assessment countdown, analysis, Events and history, and
    /// the promote, abort, pause, resume and allow-data-loss actions. Every read and action uses
    /// your kubeconfig, so your RBAC decides what it shows and may do.
    #[command(after_help = DASHBOARD_HELP)]
    Dashboard(DashboardArgs),
    /// Print the plugin's version and the image of every Numaplane operator Deployment you can
    /// see (label app.kubernetes.io/part-of=numaplane), with its ready replicas.
    #[command(after_help = EXIT_CODES)]
    Version(VersionArgs),
    /// Print a shell completion script for kubectl-numaplane (bash, zsh, fish, elvish,
    /// powershell). Example: `kubectl numaplane completion bash > /etc/bash_completion.d/kubectl-numaplane`.
    Completion(CompletionArgs),
}

#[derive(Args, Debug)]
pub struct VersionArgs {
    /// Only the plugin's version; no cluster needed.
    #[arg(long)]
    pub client: bool,
}

#[derive(Args, Debug)]
pub struct CompletionArgs {
    pub shell: clap_complete::Shell,
}

pub const DASHBOARD_HELP: &str = "\
The first line printed is the address to open, with this run's token:
  Numaplane dashboard: http://127.0.0.1:3100/?token=<64 hex digits>
(with --port 0, the port chosen). Every API request needs the token, as `Authorization: Bearer
<token>` (or `?token=` on reads); a new one is made each run. Requests must name the dashboard's
address in Host, an Origin must be the dashboard's own address, and writes (POST) need the token in
the header, that Origin and the X-Numaplane-Dashboard header, so other web pages cannot read or act
through it.
It listens on loopback only unless --allow-remote is given (never on every interface: name the
address). Ctrl-C stops it.

Exit codes:
  0  stopped with Ctrl-C
  1  error: cannot listen on the address, a non-loopback address without --allow-remote, or
     no cluster configured
  2  invalid command line";

#[derive(Args, Debug)]
pub struct DashboardArgs {
    /// Port to listen on (0: any free port).
    #[arg(long, default_value_t = 3100)]
    pub port: u16,
    /// Address to listen on: a loopback address, or with --allow-remote one address of this
    /// machine (not 0.0.0.0 or ::).
    #[arg(long, default_value = "127.0.0.1")]
    pub address: std::net::IpAddr,
    /// Allow an --address that is not loopback. Whoever reaches it and has the token acts with
    /// your credentials, and the token travels unencrypted over HTTP.
    #[arg(long)]
    pub allow_remote: bool,
}

pub const PLAN_HELP: &str = "\
Strategies:
  no-op             the live child already matches the manifest
  direct-apply      the child is updated in place
  pause-and-drain   the pipelines are paused and drained, then the child is updated
  progressive       a trial child is created and assessed before it is promoted
  (+ recreate)      a recreate field changed: the child is deleted and created anew

Every rollout in the files is planned; other objects are listed as not planned.

Exit codes:
  0  every rollout was planned
  1  error: a document unreadable or not planned (rollout or child not found, API error),
     or no rollout in the files
  2  invalid command line";

#[derive(Args, Debug)]
pub struct GetArgs {
    /// Kind: pipelinerollout (pr), monovertexrollout (mvr), isbservicerollout (isbr),
    /// numaflowcontrollerrollout (ncr); default all four.
    #[arg(value_parser = parse_kind, value_name = "KIND")]
    pub kind: Option<Kind>,
    /// Only the rollout of this name.
    #[arg(value_name = "NAME")]
    pub name: Option<String>,
    /// Redraw whenever a rollout or one of its children changes (Ctrl-C to stop).
    #[arg(short = 'w', long)]
    pub watch: bool,
    /// Output format: the tree as text (default), or the same tree as json or yaml.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Tree)]
    pub output: Output,
    /// Rollouts of all namespaces.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
}

#[derive(Args, Debug)]
pub struct ListArgs {
    /// Kind: pipelinerollout (pr), monovertexrollout (mvr), isbservicerollout (isbr),
    /// numaflowcontrollerrollout (ncr); default all four.
    #[arg(value_parser = parse_kind, value_name = "KIND")]
    pub kind: Option<Kind>,
    /// After the list, print a line for each rollout that changes (Ctrl-C to stop).
    #[arg(short = 'w', long)]
    pub watch: bool,
    /// Rollouts of all namespaces.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    Tree,
    Json,
    Yaml,
}

#[derive(Args, Debug)]
pub struct PauseArgs {
    /// Name of the PipelineRollout or MonoVertexRollout.
    pub rollout: String,
    /// Kind, when a PipelineRollout and a MonoVertexRollout share the name (pr or mvr).
    #[arg(long, value_parser = parse_kind)]
    pub kind: Option<Kind>,
}

#[derive(Args, Debug)]
pub struct ResumeArgs {
    /// Name of the PipelineRollout or MonoVertexRollout.
    pub rollout: String,
    /// Kind, when a PipelineRollout and a MonoVertexRollout share the name (pr or mvr).
    #[arg(long, value_parser = parse_kind)]
    pub kind: Option<Kind>,
    /// Keep the previous replica counts instead of restarting at scale.min (sets
    /// spec.strategy.pauseResume.fastResume: true).
    #[arg(long)]
    pub fast: bool,
}

#[derive(Args, Debug)]
pub struct AllowDataLossArgs {
    /// Name of the PipelineRollout.
    pub rollout: String,
    /// Remove the annotation instead.
    #[arg(long)]
    pub off: bool,
}

#[derive(Args, Debug)]
pub struct WaitArgs {
    /// Name of the rollout (any of the four kinds).
    pub rollout: String,
    /// The state to wait for: deployed (phase Deployed and observedGeneration == generation),
    /// healthy (deployed and condition ChildResourcesHealthy True) or promoted (deployed, and the
    /// progressive upgrade ended with its trial promoted; a failed assessment exits 1).
    #[arg(long = "for", value_enum)]
    pub goal: Goal,
    /// How long to wait, e.g. 30s, 5m, 1h30m.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Kind, when rollouts of several kinds share the name.
    #[arg(long, value_parser = parse_kind)]
    pub kind: Option<Kind>,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Goal {
    Deployed,
    Healthy,
    Promoted,
}

#[derive(Args, Debug)]
pub struct TrialArgs {
    /// Name of the PipelineRollout, MonoVertexRollout or ISBServiceRollout.
    pub rollout: String,
    /// Kind, when rollouts of several kinds share the name (pr, mvr or isbr).
    #[arg(long, value_parser = parse_kind)]
    pub kind: Option<Kind>,
}

#[derive(Args, Debug)]
pub struct HistoryArgs {
    /// Name of the rollout (any of the four kinds).
    pub rollout: String,
    /// Kind, when rollouts of several kinds share the name.
    #[arg(long, value_parser = parse_kind)]
    pub kind: Option<Kind>,
    /// Output format: a table (default), or the records as json or yaml.
    #[arg(short = 'o', long, value_enum, default_value_t = HistoryOutput::Table)]
    pub output: HistoryOutput,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum HistoryOutput {
    Table,
    Json,
    Yaml,
}

#[derive(Args, Debug)]
pub struct PlanArgs {
    /// The edited rollout manifests, as `kubectl apply -f` takes them: YAML or JSON files with
    /// one or more documents, directories (their .yaml, .yml and .json files), or `-` for
    /// standard input; repeatable.
    #[arg(short = 'f', long = "filename", value_name = "FILE", required = true)]
    pub file: Vec<PathBuf>,
    /// Also read the directories under a directory given with -f.
    #[arg(short = 'R', long)]
    pub recursive: bool,
    /// Output format: text (default) or json for scripts.
    #[arg(short = 'o', long, value_enum, default_value_t = PlanOutput::Text)]
    pub output: PlanOutput,
    /// Namespace Numaplane runs in (where its USDE and controller ConfigMaps live).
    #[arg(long, default_value = "numaplane-system", value_name = "NS")]
    pub controller_namespace: String,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanOutput {
    Text,
    Json,
}

/// Parses durations like Go's time.ParseDuration: `500ms`, `30s`, `5m`, `1h30m`, `1.5h`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("invalid duration {s:?}: use e.g. 30s, 5m, 1h30m");
    let mut rest = s.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        if num_len == 0 {
            return Err(bad());
        }
        let value: f64 = rest[..num_len].parse().map_err(|_| bad())?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let factor = match &rest[..unit_len] {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        total += value * factor;
    }
    if total <= 0.0 || !total.is_finite() {
        return Err(bad());
    }
    Ok(Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        for bad in ["", "5", "s", "5x", "-5s", "0s", "5m3"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn command_line_is_consistent() {
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from([
            "kubectl-numaplane",
            "get",
            "pr",
            "my-pipeline",
            "-n",
            "ns",
            "-o",
            "json",
        ])
        .expect("parse");
        assert_eq!(cli.global.namespace.as_deref(), Some("ns"));
        match cli.command {
            Command::Get(g) => {
                assert_eq!(g.kind, Some(Kind::Pipeline));
                assert_eq!(g.name.as_deref(), Some("my-pipeline"));
                assert_eq!(g.output, Output::Json);
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(Cli::try_parse_from(["kubectl-numaplane", "get", "pipelines"]).is_err());
    }
}

/// clap value parser for a kind argument: kubectl's names for the rollout kinds.
fn parse_kind(s: &str) -> Result<Kind, String> {
    Kind::parse_resource(s).ok_or_else(|| {
        format!(
            "unknown kind {s:?}: use pipelinerollout (pr), monovertexrollout (mvr), \
             isbservicerollout (isbr) or numaflowcontrollerrollout (ncr)"
        )
    })
}

#[cfg(test)]
mod kind_tests {
    #[test]
    fn a_child_kind_is_not_a_kind_argument() {
        assert!(super::parse_kind("pipeline").is_err());
        assert!(super::parse_kind("pr").is_ok());
    }
}
