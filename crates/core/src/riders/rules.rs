//! Group/kind filter rules shared by `permittedRiders` and `includedResources`
//! (docs/install.md): `group=<g>,kind=<k>;group=<g>,kind=<k>…`.

/// The rules could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed resource filter rules {rules:?}: {detail}")]
pub struct RuleError {
    pub rules: String,
    pub detail: String,
}

impl RuleError {
    /// Stable short reason for conditions, events and metrics.
    pub fn reason(&self) -> &'static str {
        "MalformedRules"
    }
}

/// Parsed rules: (group, kind) pairs. An empty group is the core group; an empty kind matches
/// every kind of the group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RiderRules(Vec<(String, String)>);

impl RiderRules {
    pub fn new(rules: Vec<(String, String)>) -> Self {
        Self(rules)
    }

    pub fn rules(&self) -> &[(String, String)] {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether some rule matches. Group and kind compare exactly (Kubernetes names are
    /// case-sensitive).
    pub fn permits(&self, group: &str, kind: &str) -> bool {
        self.0
            .iter()
            .any(|(g, k)| g == group && (k.is_empty() || k == kind))
    }
}

/// Parses `group=<g>,kind=<k>` rules separated by `;`. Keywords are case-insensitive; the empty
/// string is the empty list. Whitespace around rules and values is ignored (the reference keeps
/// it and then fails to match; YAML folding makes it easy to introduce).
pub fn parse_rules(s: &str) -> Result<RiderRules, RuleError> {
    if s.trim().is_empty() {
        return Ok(RiderRules::default());
    }
    let malformed = |detail: String| RuleError {
        rules: s.to_string(),
        detail,
    };
    s.split(';')
        .enumerate()
        .map(|(i, rule)| {
            let (g, k) = rule
                .split_once(',')
                .filter(|(_, k)| !k.contains(','))
                .ok_or_else(|| {
                    malformed(format!(
                        "rule {} {:?} is not group=<group>,kind=<kind>",
                        i + 1,
                        rule.trim()
                    ))
                })?;
            let value = |part: &str, keyword: &str| {
                part.split_once('=')
                    .filter(|(key, v)| key.trim().eq_ignore_ascii_case(keyword) && !v.contains('='))
                    .map(|(_, v)| v.trim().to_string())
                    .ok_or_else(|| {
                        malformed(format!(
                            "rule {} {:?}: expected {keyword}=<{keyword}>, got {:?}",
                            i + 1,
                            rule.trim(),
                            part.trim()
                        ))
                    })
            };
            Ok((value(g, "group")?, value(k, "kind")?))
        })
        .collect::<Result<_, _>>()
        .map(RiderRules)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pairs(r: &RiderRules) -> Vec<(&str, &str)> {
        r.rules()
            .iter()
            .map(|(g, k)| (g.as_str(), k.as_str()))
            .collect()
    }

    #[test]
    fn parses_the_shipped_rules() {
        let r = parse_rules(
            "group=autoscaling.k8s.io,kind=VerticalPodAutoscaler;group=autoscaling,kind=HorizontalPodAutoscaler;group=policy,kind=PodDisruptionBudget",
        )
        .unwrap();
        assert_eq!(
            pairs(&r),
            [
                ("autoscaling.k8s.io", "VerticalPodAutoscaler"),
                ("autoscaling", "HorizontalPodAutoscaler"),
                ("policy", "PodDisruptionBudget")
            ]
        );
        assert!(r.permits("autoscaling", "HorizontalPodAutoscaler"));
        assert!(!r.permits("autoscaling", "VerticalPodAutoscaler"));
        assert!(!r.permits("", "ConfigMap"));
    }

    #[test]
    fn empty_group_is_core_and_empty_kind_is_whole_group() {
        let r = parse_rules("GROUP=,KIND=ConfigMap;Group=apps,Kind=").unwrap();
        assert!(r.permits("", "ConfigMap"));
        assert!(!r.permits("", "Secret"));
        assert!(r.permits("apps", "Deployment"));
        assert!(r.permits("apps", "StatefulSet"));
        assert!(!r.permits("batch", "Job"));
    }

    #[test]
    fn empty_string_is_no_rules() {
        let r = parse_rules("").unwrap();
        assert!(r.is_empty());
        assert!(!r.permits("", ""));
    }

    #[test]
    fn whitespace_is_tolerated() {
        let r = parse_rules(" group=apps, kind=Deployment ;\n group = , kind = ConfigMap").unwrap();
        assert_eq!(pairs(&r), [("apps", "Deployment"), ("", "ConfigMap")]);
    }

    #[test]
    fn malformed_rules_are_errors() {
        for bad in [
            "apps/Deployment",
            "group=apps",
            "group=apps,kind=Deployment;",
            "group=apps,kind=Deployment,version=v1",
            "kind=Deployment,group=apps",
            "grp=apps,kind=Deployment",
            "group,kind=Deployment",
            "group=a=b,kind=Deployment",
            ";",
        ] {
            let e = parse_rules(bad).unwrap_err();
            assert!(
                e.to_string()
                    .starts_with(&format!("malformed resource filter rules {bad:?}")),
                "{bad}: {e}"
            );
            assert_eq!(e.reason(), "MalformedRules");
        }
    }

    proptest! {
        #[test]
        fn formatted_rules_parse_back(rules in proptest::collection::vec(("[a-z.]{0,12}", "[A-Za-z]{0,12}"), 1..6)) {
            let text = rules.iter().map(|(g, k)| format!("group={g},kind={k}")).collect::<Vec<_>>().join(";");
            let parsed = parse_rules(&text).unwrap();
            prop_assert_eq!(parsed.rules(), rules.as_slice());
            for (g, k) in &rules {
                let kind = if k.is_empty() { "Anything" } else { k.as_str() };
                prop_assert!(parsed.permits(g, kind));
            }
        }
    }
}
