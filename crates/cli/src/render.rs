//! Drawing the tree as text, with or without colour.

use crate::tree::{ChildNode, ConditionNode, RolloutNode, Tree};
use numaplane_api::keys::condition;

/// ANSI colouring, off unless stdout is a terminal and NO_COLOR is unset.
#[derive(Clone, Copy, Debug, Default)]
pub struct Style {
    pub color: bool,
}

impl Style {
    /// Colour when stdout is a terminal and `NO_COLOR` is unset (https://no-color.org).
    pub fn detect() -> Self {
        use std::io::IsTerminal;
        Style {
            color: std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
        }
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.color && !text.is_empty() {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    fn bold(&self, text: &str) -> String {
        self.paint("1", text)
    }

    fn dim(&self, text: &str) -> String {
        self.paint("2", text)
    }

    /// Green for good words, yellow for in-between, red for bad ones.
    fn word(&self, text: &str) -> String {
        let code = match text {
            "Deployed" | "Running" | "Healthy" | "Successful" | "promoted" | "succeeded" => "32",
            "Failed" | "Unhealthy" | "Error" | "ProgressiveFailed" | "Degraded" | "failed" => "31",
            "" => return String::new(),
            _ => "33",
        };
        self.paint(code, text)
    }
}

/// Conditions that keep a rollout from being deployed and healthy (not True).
pub fn blocking_conditions(conds: &[ConditionNode]) -> Vec<String> {
    conds
        .iter()
        .filter(|c| {
            matches!(
                c.type_.as_str(),
                condition::CHILD_RESOURCE_DEPLOYED
                    | condition::CHILD_RESOURCES_HEALTHY
                    | condition::PROGRESSIVE_UPGRADE_SUCCEEDED
            ) && c.status != "True"
        })
        .map(describe_condition)
        .collect()
}

pub fn describe_condition(c: &ConditionNode) -> String {
    let mut line = format!("{}={}", c.type_, c.status);
    if !c.reason.is_empty() {
        line.push_str(&format!(" ({})", c.reason));
    }
    if !c.message.is_empty() {
        line.push_str(&format!(": {}", c.message));
    }
    line
}

/// The whole tree; rollouts separated by a blank line. `with_namespace` prefixes each rollout
/// with its namespace (for `-A`).
pub fn render(tree: &Tree, style: Style, with_namespace: bool) -> String {
    let mut out = String::new();
    for (n, r) in tree.rollouts.iter().enumerate() {
        if n > 0 {
            out.push('\n');
        }
        render_rollout(&mut out, r, style, with_namespace);
    }
    out
}

fn join(parts: Vec<String>) -> String {
    parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("  ")
}

fn render_rollout(out: &mut String, r: &RolloutNode, st: Style, with_namespace: bool) {
    let ns = if with_namespace {
        format!("{}/", r.namespace)
    } else {
        String::new()
    };
    let phase = if r.phase.is_empty() {
        "(no status)".to_string()
    } else {
        st.word(&r.phase)
    };
    let mut head = vec![st.bold(&format!("{ns}{}/{}", r.kind, r.name)), phase];
    if let Some(u) = &r.upgrade_in_progress {
        head.push(format!("upgrade: {}", st.word(u)));
    }
    if !r.summary.is_empty() {
        let words: Vec<String> = r.summary.iter().map(|w| st.word(w)).collect();
        head.push(format!("[{}]", words.join(", ")));
    }
    if let Some(age) = &r.age {
        head.push(st.dim(&format!("age {age}")));
    }
    out.push_str(&join(head));
    out.push('\n');

    if !r.message.is_empty() && r.message != r.phase {
        out.push_str(&format!("  message: {}\n", r.message));
    }
    if r.observed_generation < r.generation {
        out.push_str(&format!(
            "  not yet reconciled: observedGeneration {} < generation {}\n",
            r.observed_generation, r.generation
        ));
    }
    for c in blocking_conditions(&r.conditions) {
        out.push_str(&format!("  waiting: {c}\n"));
    }
    if let Some(t) = &r.trial {
        let mut line = format!(
            "  trial {}: assessment {}",
            t.name,
            st.word(&t.assessment_result)
        );
        if let Some(end) = &t.basic_assessment_end_time {
            line.push_str(&format!(" until {end}"));
        }
        if let Some(a) = &t.analysis_phase {
            line.push_str(&format!(", analysis {}", st.word(a)));
        }
        if t.held {
            line.push_str(", passed: waits for the Numaflow controller trial");
        }
        out.push_str(&line);
        out.push('\n');
        for f in &t.failure_reasons {
            out.push_str(&format!("    failure: {f}\n"));
        }
        for w in &t.workloads {
            out.push_str(&format!("    workload {w}\n"));
        }
    }
    if let Some(last) = &r.last_upgrade {
        out.push_str(&format!("  last upgrade: {last}\n"));
    }
    if r.allow_data_loss == Some(true) {
        out.push_str("  allow-data-loss: true\n");
    }

    let items = r.children.len() + r.riders.len();
    if items == 0 {
        out.push_str(&format!("└─ {}\n", st.dim("(no children)")));
        return;
    }
    let mut n = 0;
    for c in &r.children {
        n += 1;
        render_child(out, c, st, n == items);
    }
    for rider in &r.riders {
        n += 1;
        let branch = if n == items { "└─" } else { "├─" };
        out.push_str(&format!("{branch} rider {}/{}\n", rider.kind, rider.name));
    }
}

fn render_child(out: &mut String, c: &ChildNode, st: Style, last: bool) {
    let (branch, indent) = if last {
        ("└─", "   ")
    } else {
        ("├─", "│  ")
    };
    let mut head = vec![
        format!("{branch} {}", st.bold(&format!("{}/{}", c.kind, c.name))),
        st.word(c.upgrade_state.as_deref().unwrap_or_default()),
    ];
    if let Some(r) = &c.progressive_result {
        head.push(format!("({})", st.word(r)));
    }
    head.extend([
        if c.phase.is_empty() {
            "(no status)".to_string()
        } else {
            st.word(&c.phase)
        },
        st.word(&c.health),
    ]);
    if let Some(p) = c.pods {
        head.push(format!("pods {}/{}", p.ready, p.desired));
    }
    if let Some(age) = &c.age {
        head.push(st.dim(&format!("age {age}")));
    }
    out.push_str(&join(head));
    out.push('\n');

    let mut lines = Vec::new();
    if let Some(p) = c.pause.as_ref().filter(|p| p.is_interesting()) {
        let mut line = format!(
            "pause: desiredPhase {}, phase {}",
            p.desired_phase,
            if p.phase.is_empty() { "-" } else { &p.phase }
        );
        if let Some(d) = p.drained_on_pause {
            line.push_str(&format!(", drainedOnPause {d}"));
        }
        lines.push(line);
    }
    lines.extend(c.unhealthy_conditions.iter().cloned());
    for a in &c.analysis_runs {
        let mut line = format!(
            "AnalysisRun/{}  {}",
            a.name,
            st.word(if a.phase.is_empty() {
                "Pending"
            } else {
                &a.phase
            })
        );
        let metrics: Vec<String> = a
            .metrics
            .iter()
            .map(|m| format!("{}={}", m.name, st.word(&m.phase)))
            .collect();
        if !metrics.is_empty() {
            line.push_str(&format!("  {}", metrics.join(", ")));
        }
        lines.push(line);
    }
    let count = lines.len();
    for (k, line) in lines.into_iter().enumerate() {
        let b = if k + 1 == count { "└─" } else { "├─" };
        out.push_str(&format!("{indent}{b} {line}\n"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::{build, fixture};
    use pretty_assertions::assert_eq;

    #[test]
    fn plain_tree() {
        let tree = build(&fixture::objects(), fixture::now());
        let text = render(&tree, Style { color: false }, false);
        let expected = "\
PipelineRollout/my-pipeline  Pending  upgrade: Progressive  [Unhealthy]  age 10m
  message: Progressing
  waiting: ChildResourcesHealthy=False (Progressing): Pipeline Progressing
  trial my-pipeline-1: assessment Unknown until 2026-01-01T12:12:00Z, analysis Running
  allow-data-loss: true
├─ Pipeline/my-pipeline-0  promoted  Running  Healthy  pods 3/3  age 9m30s
├─ Pipeline/my-pipeline-1  trial  Running  Unhealthy  pods 1/2  age 2m
│  ├─ VerticesHealthy=False (Progressing): 1 vertex not ready
│  └─ AnalysisRun/my-pipeline-1  Running  success-rate=Successful
└─ rider ConfigMap/my-cm-my-pipeline-1

MonoVertexRollout/my-mvtx  Deployed  [HealthUnknown, Paused]  age 3h10m
  waiting: ChildResourcesHealthy=Unknown (MonoVertexUnknown)
└─ MonoVertex/my-mvtx-0  promoted  Paused  Unknown  pods 0/0  age 3h9m
   └─ pause: desiredPhase Paused, phase Paused
";
        assert_eq!(text, expected);
        assert!(!text.contains('\x1b'));
    }

    #[test]
    fn a_controller_trial_lists_its_workloads() {
        let ncr = serde_json::json!({
            "metadata": {"name": "numaflow-controller", "namespace": "demo", "generation": 2},
            "status": {"phase": "Pending", "observedGeneration": 2,
                "upgradeInProgress": "Progressive",
                "message": "trial Numaflow controller numaflow-controller-1 (1.8.1): waiting",
                "progressiveStatus": {
                    "promotedControllerStatus": {"name": "numaflow-controller", "instanceID": "", "version": "1.7.5"},
                    "upgradingControllerStatus": {"name": "numaflow-controller-1", "instanceID": "1",
                        "version": "1.8.1", "assessmentResult": "Unknown",
                        "workloads": [
                            {"kind": "ISBServiceRollout", "rollout": "isb", "state": "Succeeded", "child": "isb-1"},
                            {"kind": "MonoVertexRollout", "rollout": "mvr", "state": "Waiting"}]}}}
        });
        let objects = vec![crate::tree::RolloutObjects {
            kind: numaplane_api::Kind::NumaflowController,
            rollout: ncr,
            children: vec![],
        }];
        let text = render(
            &build(&objects, fixture::now()),
            Style { color: false },
            false,
        );
        assert!(
            text.contains(
                "  trial numaflow-controller-1: assessment Unknown\n    workload ISBServiceRollout isb: Succeeded (isb-1)\n    workload MonoVertexRollout mvr: Waiting\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn colour_only_when_asked() {
        let tree = build(&fixture::objects(), fixture::now());
        let text = render(&tree, Style { color: true }, true);
        assert!(text.contains("\x1b[32mDeployed\x1b[0m"));
        assert!(text.contains("demo/PipelineRollout/my-pipeline"));
    }

    #[test]
    fn json_shape() {
        let tree = build(&fixture::objects(), fixture::now());
        let v = serde_json::to_value(&tree).expect("json");
        let pr = &v["rollouts"][0];
        assert_eq!(pr["kind"], "PipelineRollout");
        assert_eq!(pr["name"], "my-pipeline");
        assert_eq!(pr["phase"], "Pending");
        assert_eq!(pr["upgradeInProgress"], "Progressive");
        assert_eq!(pr["summary"], serde_json::json!(["Unhealthy"]));
        assert_eq!(pr["trial"]["name"], "my-pipeline-1");
        assert_eq!(pr["children"][0]["upgradeState"], "promoted");
        assert_eq!(
            pr["children"][0]["pods"],
            serde_json::json!({"ready": 3, "desired": 3})
        );
        assert_eq!(pr["children"][0]["pause"]["desiredPhase"], "Running");
        assert_eq!(pr["children"][1]["analysisRuns"][0]["phase"], "Running");
        assert_eq!(
            pr["riders"][0],
            serde_json::json!({"kind": "ConfigMap", "name": "my-cm-my-pipeline-1"})
        );
        assert_eq!(v["rollouts"][1]["children"][0]["pause"]["phase"], "Paused");
        let yaml = serde_saphyr::to_string(&tree).expect("yaml");
        assert!(yaml.contains("name: my-pipeline-1"), "{yaml}");
    }
}
