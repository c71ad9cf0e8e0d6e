//! Reads `-f` arguments as `kubectl apply -f` does: files with one or more YAML or JSON
//! documents (split at `---` lines), directories (their `.yaml`, `.yml` and `.json` files, in
//! name order; `-R` descends), `-` for standard input, and `kind: List` documents expanded into
//! their items. A document that cannot be parsed is reported with its source, number and line and
//! does not stop the others.

use serde_json::Value;
use std::path::{Path, PathBuf};

/// One document of the input.
#[derive(Debug)]
pub struct Document {
    /// Where it came from: `FILE document N (line L)`, or `FILE` for a file's only document.
    pub origin: String,
    /// The parsed object, or why it could not be read (a message naming the origin).
    pub parsed: Result<Value, String>,
}

/// Every document of `sources`, in order. Reading a file or directory that does not exist, or
/// is no file, is an error for that source (as one document that failed).
pub fn read(sources: &[PathBuf], recursive: bool) -> Vec<Document> {
    let mut out = Vec::new();
    for source in sources {
        if source.as_os_str() == "-" {
            match std::io::read_to_string(std::io::stdin()) {
                Ok(text) => split("standard input", &text, &mut out),
                Err(e) => out.push(failed("standard input", format!("reading it: {e}"))),
            }
            continue;
        }
        match files(source, recursive) {
            Ok(files) => {
                for file in files {
                    let name = file.display().to_string();
                    match std::fs::read_to_string(&file) {
                        Ok(text) => split(&name, &text, &mut out),
                        Err(e) => out.push(failed(&name, format!("reading {name}: {e}"))),
                    }
                }
            }
            Err(e) => {
                let name = source.display().to_string();
                out.push(failed(&name, format!("reading {name}: {e}")));
            }
        }
    }
    out
}

fn failed(origin: &str, why: String) -> Document {
    Document {
        origin: origin.to_string(),
        parsed: Err(why),
    }
}

fn is_manifest(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml" | "json")
    )
}

/// `path` itself if it is a file, else the manifest files under it.
fn files(path: &Path, recursive: bool) -> std::io::Result<Vec<PathBuf>> {
    if !std::fs::metadata(path)?.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    entries.sort();
    let mut out = Vec::new();
    for entry in entries {
        if entry.is_dir() {
            if recursive {
                out.extend(files(&entry, true)?);
            }
        } else if is_manifest(&entry) {
            out.push(entry);
        }
    }
    Ok(out)
}

/// A document separator: `---` alone or followed by a space (a comment, a tag).
fn is_separator(line: &str) -> bool {
    let line = line.trim_end();
    line == "---" || line.starts_with("--- ")
}

/// Splits `text` into documents and parses each; empty ones (only comments) are dropped.
fn split(name: &str, text: &str, out: &mut Vec<Document>) {
    // (first line number, first line with content, text) of each document.
    let mut docs: Vec<(usize, Option<usize>, String)> = vec![(1, None, String::new())];
    for (n, line) in text.lines().enumerate() {
        if is_separator(line) {
            docs.push((n + 2, None, String::new()));
        } else if let Some((_, content, doc)) = docs.last_mut() {
            if content.is_none() && !is_blank(line) {
                *content = Some(n + 1);
            }
            doc.push_str(line);
            doc.push('\n');
        }
    }
    // Documents with content only, named by the line where their content starts.
    let parsed: Vec<(usize, Result<Value, String>)> = docs
        .into_iter()
        .filter_map(|(start, content, doc)| Some((content?, parse(name, start, &doc))))
        .collect();
    let many = parsed.len() > 1;
    for (i, (line, parsed)) in parsed.into_iter().enumerate() {
        let origin = if many {
            format!("{name} document {} (line {line})", i + 1)
        } else {
            name.to_string()
        };
        match parsed {
            Ok(Value::Object(o)) if o.get("kind").and_then(Value::as_str) == Some("List") => {
                let items = o.get("items").and_then(Value::as_array);
                for (j, item) in items.into_iter().flatten().enumerate() {
                    out.push(Document {
                        origin: format!("{origin}, item {j}"),
                        parsed: Ok(item.clone()),
                    });
                }
            }
            Ok(Value::Object(o)) => out.push(Document {
                origin,
                parsed: Ok(Value::Object(o)),
            }),
            Ok(other) => out.push(Document {
                parsed: Err(format!(
                    "{origin}: expected an object with apiVersion and kind, found {}",
                    kind_of(&other)
                )),
                origin,
            }),
            Err(e) => out.push(Document {
                parsed: Err(format!("{origin}: {e}")),
                origin,
            }),
        }
    }
}

/// A line without content: empty, a comment, or the document end marker.
fn is_blank(line: &str) -> bool {
    let l = line.trim();
    l.is_empty() || l.starts_with('#') || l == "..."
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Parses one document (YAML, or JSON, which is YAML) whose first line is line `line` of `name`;
/// an error names the line in the whole file.
fn parse(name: &str, line: usize, doc: &str) -> Result<Value, String> {
    serde_saphyr::from_str::<Value>(doc).map_err(|e| {
        let options = serde_saphyr::render_options! {
            line_offset: (line - 1) as u64,
            source_name: Some(name),
        };
        let text = e.render_with_options(options);
        // Printed after `error: FILE document N (line L): ` already.
        text.strip_prefix("error: ")
            .map(str::to_string)
            .unwrap_or(text)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn docs(text: &str) -> Vec<Document> {
        let mut out = Vec::new();
        split("f.yaml", text, &mut out);
        out
    }

    #[test]
    fn one_document_is_named_by_its_file() {
        let d = docs("kind: A\nmetadata: {name: a}\n");
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].origin, "f.yaml");
        assert_eq!(
            d[0].parsed.as_ref().map(|v| v["kind"].clone()),
            Ok("A".into())
        );
    }

    #[test]
    fn documents_are_split_at_separators_with_their_lines() {
        let d = docs("# header\n---\nkind: A\n--- # second\nkind: B\n---\n\n---\n# c\nkind: C\n");
        let origins: Vec<&str> = d.iter().map(|d| d.origin.as_str()).collect();
        assert_eq!(
            origins,
            [
                "f.yaml document 1 (line 3)",
                "f.yaml document 2 (line 5)",
                "f.yaml document 3 (line 10)"
            ]
        );
        let kinds: Vec<Value> = d
            .iter()
            .map(|d| {
                d.parsed
                    .as_ref()
                    .map(|v| v["kind"].clone())
                    .unwrap_or_default()
            })
            .collect();
        assert_eq!(kinds, ["A", "B", "C"]);
    }

    #[test]
    fn a_broken_document_names_its_line_and_spares_the_others() {
        let d = docs("kind: A\n---\nkind: B\nmetadata: [unclosed\n---\nkind: C\n");
        assert_eq!(d.len(), 3);
        let err = d[1].parsed.as_ref().expect_err("broken");
        assert!(
            err.starts_with("f.yaml document 2 (line 3): line 4 column 11: unclosed bracket"),
            "{err}"
        );
        assert!(err.contains("--> f.yaml:4:11"), "{err}");
        assert!(d[2].parsed.is_ok());
    }

    #[test]
    fn lists_and_non_objects() {
        let d = docs(r#"{"kind": "List", "items": [{"kind": "A"}, {"kind": "B"}]}"#);
        let origins: Vec<&str> = d.iter().map(|d| d.origin.as_str()).collect();
        assert_eq!(origins, ["f.yaml, item 0", "f.yaml, item 1"]);
        let d = docs("- a\n- b\n");
        assert_eq!(
            d[0].parsed,
            Err("f.yaml: expected an object with apiVersion and kind, found a list".into())
        );
    }

    #[test]
    fn directories_hold_their_manifest_files_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("b.yaml"), "kind: B\n").expect("write");
        std::fs::write(dir.path().join("a.json"), r#"{"kind": "A"}"#).expect("write");
        std::fs::write(dir.path().join("notes.txt"), "not a manifest").expect("write");
        std::fs::create_dir(dir.path().join("sub")).expect("mkdir");
        std::fs::write(dir.path().join("sub/c.yml"), "kind: C\n").expect("write");
        let kinds = |recursive| -> Vec<Value> {
            read(&[dir.path().to_path_buf()], recursive)
                .into_iter()
                .map(|d| d.parsed.map(|v| v["kind"].clone()).unwrap_or_default())
                .collect()
        };
        assert_eq!(kinds(false), ["A", "B"]);
        assert_eq!(kinds(true), ["A", "B", "C"]);
        let missing = read(&[dir.path().join("nope.yaml")], false);
        assert!(
            missing[0]
                .parsed
                .as_ref()
                .is_err_and(|e| e.starts_with("reading ")),
            "{missing:?}"
        );
    }
}
