//! Configuration (docs/compatibility.md): the controller config file, and the ConfigMap-borne USDE,
//! namespace-level and Numaflow-controller-definition configs. Parsing only; callers decide
//! what to do with an invalid config (the reference installed it anyway and then failed every
//! reconcile; keeping the last good one is the better choice).

mod definitions;
mod usde;
mod value;

pub use definitions::parse_controller_definitions;
pub use usde::{SpecField, UsdeConfig, UsdeKindConfig, parse_usde_configmap};

use crate::riders::{RiderRules, parse_rules};
use numaplane_api::common::UpgradeStrategy;
use std::collections::BTreeMap;
use std::time::Duration;
use value::{
    get, invalid, join, list, load_yaml, object, required_str, weak_bool, weak_int_in, weak_string,
};

/// Why a configuration could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The text is not YAML.
    #[error("{what}: invalid YAML: {message}")]
    Yaml { what: String, message: String },
    /// A key has a wrong value.
    #[error("{key}: {problem}")]
    Invalid { key: String, problem: String },
}

impl ConfigError {
    /// Stable short reason for conditions, events and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            ConfigError::Yaml { .. } => "ConfigParseError",
            ConfigError::Invalid { .. } => "InvalidConfig",
        }
    }
}

/// `logLevel`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Verbose,
    Debug,
    #[default]
    Info,
    Warn,
}

impl LogLevel {
    /// Case-insensitive; anything unknown is `Info` (reference behaviour).
    pub fn parse(s: &str) -> LogLevel {
        match s.trim().to_ascii_lowercase().as_str() {
            "verbose" => LogLevel::Verbose,
            "debug" => LogLevel::Debug,
            "warn" => LogLevel::Warn,
            _ => LogLevel::Info,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Verbose => "VERBOSE",
            LogLevel::Debug => "DEBUG",
            LogLevel::Info => "INFO",
            LogLevel::Warn => "WARN",
        }
    }
}

/// The upgrade strategy a user chose for a namespace (`defaultUpgradeStrategy`, namespace-level
/// `upgradeStrategy`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum UserStrategy {
    Progressive,
    PauseAndDrain,
    #[default]
    NoStrategy,
}

impl UserStrategy {
    /// `progressive`, `pause-and-drain`, `no-strategy`, or `""` (no-strategy).
    pub fn parse(s: &str) -> Option<UserStrategy> {
        match s.trim() {
            "progressive" => Some(UserStrategy::Progressive),
            "pause-and-drain" => Some(UserStrategy::PauseAndDrain),
            "no-strategy" | "" => Some(UserStrategy::NoStrategy),
            _ => None,
        }
    }

    fn parse_at(s: &str, key: &str) -> Result<UserStrategy, ConfigError> {
        Self::parse(s).ok_or_else(|| {
            invalid(
                key,
                format!("{s:?} is not one of progressive, pause-and-drain, no-strategy"),
            )
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            UserStrategy::Progressive => "progressive",
            UserStrategy::PauseAndDrain => "pause-and-drain",
            UserStrategy::NoStrategy => "no-strategy",
        }
    }

    /// The strategy a data-loss-risky change gets under this user strategy.
    pub fn data_loss_strategy(self) -> UpgradeStrategy {
        match self {
            UserStrategy::Progressive => UpgradeStrategy::Progressive,
            UserStrategy::PauseAndDrain => UpgradeStrategy::PipelinePauseAndDrain,
            UserStrategy::NoStrategy => UpgradeStrategy::DirectApply,
        }
    }
}

/// A progressive assessment schedule `delay,end,period,interval` (seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AssessmentSchedule {
    /// Wait after the trial is initialised before assessing.
    pub delay: Duration,
    /// Fail if not healthy this long after assessment started.
    pub end: Duration,
    /// Continuous health required.
    pub period: Duration,
    /// Re-check interval.
    pub interval: Duration,
}

impl AssessmentSchedule {
    /// Parses exactly four comma-separated non-negative integers; `key` names the field in
    /// errors (e.g. `spec.strategy.progressive.assessmentSchedule`).
    pub fn parse(s: &str, key: &str) -> Result<AssessmentSchedule, ConfigError> {
        let bad = || {
            invalid(
                key,
                format!(
                    "{s:?} is not 4 comma-separated non-negative integers (delay,end,period,interval)"
                ),
            )
        };
        let secs: Vec<u64> = s
            .split(',')
            .map(|p| p.trim().parse::<u64>().map_err(|_| bad()))
            .collect::<Result<_, _>>()?;
        let [delay, end, period, interval] = secs[..] else {
            return Err(bad());
        };
        Ok(AssessmentSchedule {
            delay: Duration::from_secs(delay),
            end: Duration::from_secs(end),
            period: Duration::from_secs(period),
            interval: Duration::from_secs(interval),
        })
    }

    /// The interval to requeue at: never 0, which would spin (the reference only warns "don't
    /// use 0", and the shipped ISB schedule is `0,0,0,10`).
    pub fn requeue_interval(&self) -> Duration {
        self.interval.max(Duration::from_secs(1))
    }
}

/// Default of `pipeline.deletionDrainTimeoutSeconds`: a few minutes, so a GitOps deletion does
/// not hang on a pipeline that cannot drain.
pub const DEFAULT_DELETION_DRAIN_TIMEOUT: Duration = Duration::from_secs(300);

/// Default of `upgradeHistoryLimit`.
pub const DEFAULT_UPGRADE_HISTORY_LIMIT: usize = 10;
/// Most attempts a status may keep: a status is bounded in size.
pub const MAX_UPGRADE_HISTORY_LIMIT: i64 = 50;

/// `includedResources` when the key is absent: the kinds of the shipped Numaflow controller
/// definitions (`config/manager/controller-config.yaml` lists the same).
pub const DEFAULT_INCLUDED_RESOURCES: &str = "group=apps,kind=Deployment;group=,kind=ConfigMap;\
    group=,kind=ServiceAccount;group=,kind=Secret;group=,kind=Service;\
    group=rbac.authorization.k8s.io,kind=RoleBinding;group=rbac.authorization.k8s.io,kind=Role";

/// The controller config file (`config.yaml` of ConfigMap `numaplane-controller-config`).
#[derive(Debug, Clone, PartialEq)]
pub struct ControllerConfig {
    pub log_level: LogLevel,
    /// Kinds a NumaflowController may render, and manages and prunes: a definition holding any
    /// other kind is refused whole.
    pub included_resources: RiderRules,
    /// `numaflowControllerDefinitionsNamespaces`: namespaces besides the operator's own whose
    /// Numaflow controller definitions are trusted (Numaplane only; empty by default).
    pub definitions_namespaces: Vec<String>,
    pub default_upgrade_strategy: UserStrategy,
    /// `progressive.defaultAssessmentSchedule`, kinds lower-cased, in file order.
    pub default_assessment_schedules: Vec<(String, AssessmentSchedule)>,
    /// A still-running AnalysisRun older than this counts as success.
    pub analysis_run_timeout: Duration,
    /// Kinds riders may have; empty ⇒ none.
    pub permitted_riders: RiderRules,
    /// Percent of historical pods used while draining a recyclable pipeline.
    pub recycle_scale_factor: i32,
    pub max_recyclable_duration: Duration,
    pub force_drain_failure_wait: Duration,
    pub keep_undrained_pipelines: bool,
    /// How long a deleted PipelineRollout waits for its pipelines to pause and drain before
    /// deleting them undrained (`pipeline.deletionDrainTimeoutSeconds`; Numaplane only).
    pub deletion_drain_timeout: Duration,
    pub disable_analysis_runs_for_pipeline: bool,
    /// Upgrade attempts kept in each rollout's `status.upgradeHistory` (Numaplane only).
    pub upgrade_history_limit: usize,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            log_level: LogLevel::Info,
            included_resources: default_included_resources(),
            definitions_namespaces: Vec::new(),
            default_upgrade_strategy: UserStrategy::NoStrategy,
            default_assessment_schedules: Vec::new(),
            analysis_run_timeout: Duration::from_secs(1200),
            permitted_riders: RiderRules::default(),
            recycle_scale_factor: 50,
            max_recyclable_duration: Duration::from_secs(60 * 60),
            force_drain_failure_wait: Duration::from_secs(15),
            keep_undrained_pipelines: false,
            deletion_drain_timeout: DEFAULT_DELETION_DRAIN_TIMEOUT,
            disable_analysis_runs_for_pipeline: false,
            upgrade_history_limit: DEFAULT_UPGRADE_HISTORY_LIMIT,
        }
    }
}

impl ControllerConfig {
    /// The configured schedule for a child kind, matched case-insensitively (so
    /// `InterstepBufferService` matches `InterStepBufferService`); the first entry wins.
    pub fn assessment_schedule(&self, kind: numaplane_api::Kind) -> Option<AssessmentSchedule> {
        self.default_assessment_schedules
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(kind.child_kind()))
            .map(|(_, s)| *s)
    }
}

/// Parses the controller config file. Unknown keys are ignored (forward compatibility, and
/// `numaflowControllerImageNames`, which the reference parses but never uses).
pub fn parse_controller_config(yaml: &str) -> Result<ControllerConfig, ConfigError> {
    let mut cfg = ControllerConfig::default();
    let doc = load_yaml(yaml, "config.yaml")?;
    // Fail closed: the defaults apply every change directly (`no-strategy`), so an emptied
    // ConfigMap or a misspelt key must not quietly become them.
    let root = object(&doc, "config.yaml")?
        .filter(|m| !m.is_empty())
        .ok_or_else(|| {
            invalid(
                "config.yaml",
                "empty: refused rather than run on the defaults (defaultUpgradeStrategy \
                 no-strategy applies every change directly)",
            )
        })?;
    known_keys(root, "", TOP_KEYS)?;
    if let Some(v) = get(root, "logLevel") {
        cfg.log_level = LogLevel::parse(&weak_string(v, "logLevel")?);
    }
    if get(root, "includedResources").is_some() {
        cfg.included_resources = rules_at(root, "includedResources")?;
    }
    cfg.definitions_namespaces = namespaces_at(root, "numaflowControllerDefinitionsNamespaces")?;
    cfg.permitted_riders = rules_at(root, "permittedRiders")?;
    if let Some(v) = get(root, "defaultUpgradeStrategy") {
        let key = "defaultUpgradeStrategy";
        cfg.default_upgrade_strategy = UserStrategy::parse_at(&weak_string(v, key)?, key)?;
    }
    if let Some(v) = get(root, "featureFlagDisableAnalysisRunsForPipeline") {
        cfg.disable_analysis_runs_for_pipeline =
            weak_bool(v, "featureFlagDisableAnalysisRunsForPipeline")?;
    }
    if let Some(v) = get(root, "upgradeHistoryLimit") {
        let n = weak_int_in(v, "upgradeHistoryLimit", 0, MAX_UPGRADE_HISTORY_LIMIT)?;
        cfg.upgrade_history_limit = usize::try_from(n).unwrap_or(DEFAULT_UPGRADE_HISTORY_LIMIT);
    }

    if let Some(progressive) = get(root, "progressive")
        .map(|v| object(v, "progressive"))
        .transpose()?
        .flatten()
    {
        known_keys(progressive, "progressive", PROGRESSIVE_KEYS)?;
        let key = "progressive.defaultAssessmentSchedule";
        for (i, item) in list(get(progressive, "defaultAssessmentSchedule"), key)?
            .iter()
            .enumerate()
        {
            let at = format!("{key}[{i}]");
            let entry =
                object(item, &at)?.ok_or_else(|| invalid(&at, "expected a mapping, got null"))?;
            let kind = required_str(entry, "kind", &join(&at, "kind"))?;
            let schedule_key = join(&at, "schedule");
            let schedule = weak_string(
                get(entry, "schedule")
                    .ok_or_else(|| invalid(&schedule_key, "required string is missing"))?,
                &schedule_key,
            )?;
            cfg.default_assessment_schedules.push((
                kind.to_ascii_lowercase(),
                AssessmentSchedule::parse(&schedule, &schedule_key)?,
            ));
        }
        if let Some(v) = get(progressive, "analysisRunTimeout") {
            let secs = weak_int_in(v, "progressive.analysisRunTimeout", 0, i64::from(u32::MAX))?;
            cfg.analysis_run_timeout = seconds(secs);
        }
    }

    if let Some(pipeline) = get(root, "pipeline")
        .map(|v| object(v, "pipeline"))
        .transpose()?
        .flatten()
    {
        known_keys(pipeline, "pipeline", PIPELINE_KEYS)?;
        if let Some(v) = get(pipeline, "recycleScaleFactor") {
            // 0 would divide the pause grace period by zero; above 100 % is not a scale-down.
            let f = weak_int_in(v, "pipeline.recycleScaleFactor", 1, 100)?;
            cfg.recycle_scale_factor = i32::try_from(f).unwrap_or(50);
        }
        if let Some(v) = get(pipeline, "maxRecyclableDurationMinutes") {
            let m = weak_int_in(
                v,
                "pipeline.maxRecyclableDurationMinutes",
                0,
                i64::from(i32::MAX),
            )?;
            cfg.max_recyclable_duration = seconds(m * 60);
        }
        if let Some(v) = get(pipeline, "forceDrainFailureWaitDuration") {
            let s = weak_int_in(
                v,
                "pipeline.forceDrainFailureWaitDuration",
                0,
                i64::from(i32::MAX),
            )?;
            cfg.force_drain_failure_wait = seconds(s);
        }
        if let Some(v) = get(pipeline, "keepUndrainedPipelines") {
            cfg.keep_undrained_pipelines = weak_bool(v, "pipeline.keepUndrainedPipelines")?;
        }
        if let Some(v) = get(pipeline, "deletionDrainTimeoutSeconds") {
            let s = weak_int_in(
                v,
                "pipeline.deletionDrainTimeoutSeconds",
                0,
                i64::from(i32::MAX),
            )?;
            cfg.deletion_drain_timeout = seconds(s);
        }
    }
    Ok(cfg)
}

/// The keys of `config.yaml` (the reference's, `numaflowControllerImageNames` read and unused as
/// there, and ours), of its `progressive` and its `pipeline` sections.
const TOP_KEYS: &[&str] = &[
    "logLevel",
    "includedResources",
    "numaflowControllerDefinitionsNamespaces",
    "permittedRiders",
    "defaultUpgradeStrategy",
    "featureFlagDisableAnalysisRunsForPipeline",
    "upgradeHistoryLimit",
    "progressive",
    "pipeline",
    "numaflowControllerImageNames",
];
const PROGRESSIVE_KEYS: &[&str] = &["defaultAssessmentSchedule", "analysisRunTimeout"];
const PIPELINE_KEYS: &[&str] = &[
    "recycleScaleFactor",
    "maxRecyclableDurationMinutes",
    "forceDrainFailureWaitDuration",
    "keepUndrainedPipelines",
    "deletionDrainTimeoutSeconds",
];

/// Refuses a key the section does not have (keys match case-insensitively, as they are read),
/// naming the one meant when it is a near miss: a misspelt key would otherwise leave its
/// setting at the default without a word.
fn known_keys(
    section: &serde_json::Map<String, serde_json::Value>,
    prefix: &str,
    known: &[&str],
) -> Result<(), ConfigError> {
    let Some(unknown) = section
        .keys()
        .find(|k| !known.iter().any(|n| n.eq_ignore_ascii_case(k)))
    else {
        return Ok(());
    };
    let near = known
        .iter()
        .find(|n| near_miss(&n.to_ascii_lowercase(), &unknown.to_ascii_lowercase()));
    let hint = near.map_or_else(
        || format!("known keys: {}", known.join(", ")),
        |n| format!("did you mean {:?}?", join(prefix, n)),
    );
    Err(invalid(
        &join(prefix, unknown),
        format!("unknown key; {hint}"),
    ))
}

/// Whether `a` and `b` are at most two edits apart (a letter added, dropped or changed).
fn near_miss(a: &str, b: &str) -> bool {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (diag + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()] <= 2
}

/// The parsed [`DEFAULT_INCLUDED_RESOURCES`].
fn default_included_resources() -> RiderRules {
    parse_rules(DEFAULT_INCLUDED_RESOURCES).unwrap_or_default()
}

/// A list of namespace names (each a DNS label, as Kubernetes requires); duplicates dropped.
fn namespaces_at(
    root: &serde_json::Map<String, serde_json::Value>,
    key: &str,
) -> Result<Vec<String>, ConfigError> {
    let mut out: Vec<String> = Vec::new();
    for (i, item) in list(get(root, key), key)?.iter().enumerate() {
        let at = format!("{key}[{i}]");
        let ns = match item {
            serde_json::Value::String(s) => s.trim(),
            other => {
                return Err(invalid(
                    &at,
                    format!(
                        "expected a namespace name, got {}",
                        crate::json::describe(other)
                    ),
                ));
            }
        };
        if let Some(problem) = crate::naming::dns_label_problem(ns) {
            return Err(invalid(
                &at,
                format!("{ns:?} is not a namespace name: {problem}"),
            ));
        }
        if !out.iter().any(|n| n == ns) {
            out.push(ns.to_string());
        }
    }
    Ok(out)
}

fn seconds(n: i64) -> Duration {
    Duration::from_secs(u64::try_from(n).unwrap_or(0))
}

fn rules_at(
    root: &serde_json::Map<String, serde_json::Value>,
    key: &str,
) -> Result<RiderRules, ConfigError> {
    match get(root, key) {
        None => Ok(RiderRules::default()),
        Some(v) => parse_rules(&weak_string(v, key)?).map_err(|e| invalid(key, e.to_string())),
    }
}

/// The `upgradeStrategy` of a namespace-level ConfigMap. A missing key is `""`, i.e.
/// no-strategy, as in the reference.
pub fn parse_namespace_config(
    data: &BTreeMap<String, String>,
) -> Result<UserStrategy, ConfigError> {
    let key = "upgradeStrategy";
    let value = data.get(key).or_else(|| {
        data.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v)
    });
    UserStrategy::parse_at(value.map_or("", String::as_str), key)
}

/// The strategy in force for a namespace: its own setting if any, else the global default.
pub fn effective_strategy(
    namespace_override: Option<UserStrategy>,
    global: &ControllerConfig,
) -> UserStrategy {
    namespace_override.unwrap_or(global.default_upgrade_strategy)
}

#[cfg(test)]
mod tests;
