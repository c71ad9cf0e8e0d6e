//! Templating of child specs, child metadata and rider definitions (docs/compatibility.md).
//!
//! Semantics follow the reference's `fasttemplate` use exactly, because users' manifests depend
//! on them:
//! - a tag is the text between `{{` and the next `}}`, matched **literally** (no whitespace
//!   trimming: `{{ .pipeline-name }}` is not `{{.pipeline-name}}`);
//! - a known tag is replaced by its value, inserted raw (no JSON escaping);
//! - an **unknown** tag is replaced by the empty string (reference compatibility: keeping it
//!   would change the objects existing users get);
//! - a `{{` without a later `}}` is an error.

use serde_json::Value;

/// Why templating failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// A `{{` with no `}}` after it in the same string, at field `at` (empty for a bare string
    /// until the caller names it, see [`TemplateError::under`]).
    #[error("{at}: \"{{{{\" is not closed (in {text:?})", at = if at.is_empty() { "template" } else { at })]
    Unterminated { at: String, text: String },
}

impl TemplateError {
    /// Stable short reason for conditions, events and metrics.
    pub fn reason(&self) -> &'static str {
        "InvalidTemplate"
    }

    /// The same error with its field path placed under `prefix` (`spec.pipeline.spec`).
    pub fn under(self, prefix: &str) -> Self {
        match self {
            TemplateError::Unterminated { at, text } => TemplateError::Unterminated {
                at: join_path(prefix, &at),
                text,
            },
        }
    }
}

fn join_path(prefix: &str, rest: &str) -> String {
    if prefix.is_empty() {
        rest.to_string()
    } else if rest.is_empty() {
        prefix.to_string()
    } else if rest.starts_with('[') {
        format!("{prefix}{rest}")
    } else {
        format!("{prefix}.{rest}")
    }
}

/// `key` as a path segment: `.name` for plain keys, `["a.b/c"]` otherwise.
fn key_segment(key: &str) -> String {
    if !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        key.to_string()
    } else {
        format!("[{key:?}]")
    }
}

/// The tag → value pairs available to a template. Keys include the leading dot, as written
/// between the braces (`.pipeline-name`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TemplateVars(Vec<(String, String)>);

impl TemplateVars {
    /// No variables: every tag renders empty.
    pub fn new() -> Self {
        Self::default()
    }

    /// `.pipeline-name`, `.pipeline-namespace`.
    pub fn pipeline(name: &str, namespace: &str) -> Self {
        Self::new()
            .with(".pipeline-name", name)
            .with(".pipeline-namespace", namespace)
    }

    /// Pipeline variables plus `.vertex-name` (per-vertex riders only).
    pub fn pipeline_vertex(name: &str, namespace: &str, vertex: &str) -> Self {
        Self::pipeline(name, namespace).with(".vertex-name", vertex)
    }

    /// `.monovertex-name`, `.monovertex-namespace`.
    pub fn monovertex(name: &str, namespace: &str) -> Self {
        Self::new()
            .with(".monovertex-name", name)
            .with(".monovertex-namespace", namespace)
    }

    /// `.isbsvc-name`, `.isbsvc-namespace`.
    pub fn isbsvc(name: &str, namespace: &str) -> Self {
        Self::new()
            .with(".isbsvc-name", name)
            .with(".isbsvc-namespace", namespace)
    }

    /// The variables of a child of `kind` (none for a NumaflowController, whose spec is not a
    /// template).
    pub fn for_child(kind: numaplane_api::Kind, name: &str, namespace: &str) -> Self {
        use numaplane_api::Kind;
        match kind {
            Kind::Pipeline => Self::pipeline(name, namespace),
            Kind::MonoVertex => Self::monovertex(name, namespace),
            Kind::IsbService => Self::isbsvc(name, namespace),
            Kind::NumaflowController => Self::new(),
        }
    }

    /// Adds (or replaces) a variable.
    pub fn with(mut self, key: &str, value: &str) -> Self {
        match self.0.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value.to_string(),
            None => self.0.push((key.to_string(), value.to_string())),
        }
        self
    }

    /// The value of a tag, if known.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

const OPEN: &str = "{{";
const CLOSE: &str = "}}";

/// Substitutes every `{{tag}}` in `input`.
pub fn render_str(input: &str, vars: &TemplateVars) -> Result<String, TemplateError> {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(start) = rest.find(OPEN) {
        out.push_str(&rest[..start]);
        let after_open = &rest[start + OPEN.len()..];
        let Some(end) = after_open.find(CLOSE) else {
            return Err(TemplateError::Unterminated {
                at: String::new(),
                text: input.chars().take(80).collect(),
            });
        };
        if let Some(value) = vars.get(&after_open[..end]) {
            out.push_str(value);
        }
        rest = &after_open[end + CLOSE.len()..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Templates every string of a JSON value, keys included. The reference substitutes in the JSON
/// text as a whole, so a `{{` left open in one value swallowed the JSON up to the next `}}`
/// somewhere else; here a tag never spans more than one string, and an open one is reported
/// at its field (`vertices[1].udf.container.image`). The values available (names and
/// namespaces of Kubernetes objects) contain no JSON syntax, so the results are the same.
pub fn render_json(value: &Value, vars: &TemplateVars) -> Result<Value, TemplateError> {
    if !value.to_string().contains(OPEN) {
        return Ok(value.clone());
    }
    render_value(value, vars, "")
}

fn render_value(value: &Value, vars: &TemplateVars, at: &str) -> Result<Value, TemplateError> {
    Ok(match value {
        Value::String(s) => Value::String(render_str(s, vars).map_err(|e| e.under(at))?),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, v)| render_value(v, vars, &format!("{at}[{i}]")))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => {
            let mut out = serde_json::Map::with_capacity(map.len());
            for (k, v) in map {
                let here = join_path(at, &key_segment(k));
                let key = render_str(k, vars).map_err(|e| e.under(&here))?;
                out.insert(key, render_value(v, vars, &here)?);
            }
            Value::Object(out)
        }
        other => other.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn vars() -> TemplateVars {
        TemplateVars::pipeline("my-pipeline-3", "ns1")
    }

    #[test]
    fn known_tags_are_replaced() {
        assert_eq!(
            render_str("{{.pipeline-namespace}}-{{.pipeline-name}}", &vars()).unwrap(),
            "ns1-my-pipeline-3"
        );
    }

    #[test]
    fn unknown_tags_render_empty() {
        assert_eq!(render_str("a{{.nope}}b", &vars()).unwrap(), "ab");
        assert_eq!(render_str("a{{}}b", &vars()).unwrap(), "ab");
    }

    #[test]
    fn tags_are_matched_literally_without_trimming() {
        assert_eq!(render_str("x{{ .pipeline-name }}y", &vars()).unwrap(), "xy");
    }

    #[test]
    fn tag_runs_to_the_first_close_after_the_open() {
        // The tag text is "{.pipeline-name" (unknown), so nothing but the trailing "}" remains.
        assert_eq!(render_str("{{{.pipeline-name}}}", &vars()).unwrap(), "}");
        // A second "{{" inside a tag is part of the tag text.
        assert_eq!(render_str("{{a{{.pipeline-name}}!", &vars()).unwrap(), "!");
    }

    #[test]
    fn unterminated_open_is_an_error() {
        let err = render_str("abc{{.pipeline-name", &vars()).unwrap_err();
        assert_eq!(
            err,
            TemplateError::Unterminated {
                at: String::new(),
                text: "abc{{.pipeline-name".into()
            }
        );
        assert_eq!(err.reason(), "InvalidTemplate");
        assert!(render_str("{{.pipeline-name}}{{", &vars()).is_err());
    }

    #[test]
    fn an_open_tag_is_reported_at_its_field_and_never_spans_two_values() {
        // The reference's text-level substitution turned this into `"image": ""`, silently.
        let spec = json!({"vertices": [
            {"name": "in", "source": {"generator": {}}},
            {"name": "cat", "udf": {"container": {"image": "quay.io/{{.pipeline-name"}}},
            {"name": "out", "sink": {"log": {"note": "x}}"}}}
        ]});
        let err = render_json(&spec, &vars())
            .unwrap_err()
            .under("spec.pipeline.spec");
        assert_eq!(
            err.to_string(),
            r#"spec.pipeline.spec.vertices[1].udf.container.image: "{{" is not closed (in "quay.io/{{.pipeline-name")"#
        );
        // Keys are fields too; a key with dots is quoted.
        let err = render_json(&json!({"metadata": {"a.b/{{x": 1}}), &vars()).unwrap_err();
        assert!(
            err.to_string()
                .starts_with(r#"metadata["a.b/{{x"]: "{{" is not closed"#),
            "{err}"
        );
    }

    #[test]
    fn stray_close_is_literal() {
        assert_eq!(render_str("a}}b", &vars()).unwrap(), "a}}b");
    }

    #[test]
    fn constructors_define_reference_keys() {
        let v = TemplateVars::pipeline_vertex("p", "n", "v");
        assert_eq!(v.get(".pipeline-name"), Some("p"));
        assert_eq!(v.get(".pipeline-namespace"), Some("n"));
        assert_eq!(v.get(".vertex-name"), Some("v"));
        let m = TemplateVars::monovertex("m", "n");
        assert_eq!(m.get(".monovertex-name"), Some("m"));
        assert_eq!(m.get(".monovertex-namespace"), Some("n"));
        assert_eq!(m.get(".pipeline-name"), None);
        let i = TemplateVars::isbsvc("i", "n");
        assert_eq!(i.get(".isbsvc-name"), Some("i"));
        assert_eq!(i.get(".isbsvc-namespace"), Some("n"));
        assert_eq!(
            TemplateVars::new().with("k", "1").with("k", "2").get("k"),
            Some("2")
        );
    }

    #[test]
    fn render_json_templates_keys_and_values() {
        let input = json!({
            "metadata": {"annotations": {"a": "{{.pipeline-namespace}}-{{.pipeline-name}}"}},
            "{{.pipeline-name}}": [1, "{{.x}}"]
        });
        let out = render_json(&input, &vars()).unwrap();
        assert_eq!(
            out,
            json!({
                "metadata": {"annotations": {"a": "ns1-my-pipeline-3"}},
                "my-pipeline-3": [1, ""]
            })
        );
    }

    #[test]
    fn render_json_values_stay_strings() {
        let v = TemplateVars::new().with(".n", "5");
        assert_eq!(
            render_json(&json!({"k": "{{.n}}", "l": [1, "{{.n}}-x"]}), &v).unwrap(),
            json!({"k": "5", "l": [1, "5-x"]})
        );
    }

    proptest! {
        #[test]
        fn text_without_open_is_unchanged(s in "[^{]*") {
            prop_assert_eq!(render_str(&s, &vars()).unwrap(), s);
        }

        #[test]
        fn never_panics(s in ".*") {
            let _ = render_str(&s, &vars());
        }

        #[test]
        fn known_tag_between_plain_text(a in "[a-z ]*", b in "[a-z ]*") {
            let input = format!("{a}{{{{.pipeline-name}}}}{b}");
            prop_assert_eq!(render_str(&input, &vars()).unwrap(), format!("{a}my-pipeline-3{b}"));
        }

        #[test]
        fn json_without_tags_round_trips(k in "[a-z]{1,8}", s in "[^{}]*", n in any::<i64>()) {
            let v = json!({k: [s, n, null, true]});
            prop_assert_eq!(render_json(&v, &vars()).unwrap(), v);
        }
    }
}
