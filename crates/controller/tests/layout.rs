//! The controller's modules import one another one way only: no module reaches, directly or
//! through others, back into a module that uses it (issue "observe, plan, act, report", item 5).
//! A cycle is what makes a reconcile hard to follow: a reader entering `rollout::reconcile`
//! should go down, never round. Read from the source, as a reviewer would.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module path (`crate::rollout::pipeline`) of a source file under `src/`.
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?.with_extension("");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|l| l == "mod" || l == "lib") {
        parts.pop();
    }
    let mut path = vec!["crate".to_string()];
    path.extend(parts);
    Some(path.join("::"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src").flatten() {
        let p = entry.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The code of a file without comments, string literals and its `#[cfg(test)]` module (a test
/// module's `use super::*` is the module itself).
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            '\'' if chars.peek() == Some(&'"') => {
                // The character literal '"'.
                chars.next();
                chars.next();
            }
            '"' if out.ends_with("r#") => {
                // A raw string: up to `"#`, quotes and all.
                let mut prev = ' ';
                for c in chars.by_ref() {
                    if prev == '"' && c == '#' {
                        break;
                    }
                    prev = c;
                }
                out.push_str("\"\"#");
            }
            '"' => {
                let mut escaped = false;
                for c in chars.by_ref() {
                    match (escaped, c) {
                        (false, '\\') => escaped = true,
                        (false, '"') => break,
                        _ => escaped = false,
                    }
                }
                out.push_str("\"\"");
            }
            c => out.push(c),
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Every path the code names, as its segments: `a::b::c`, and each item of `a::{b, c::d}`.
fn paths(code: &str) -> Vec<Vec<String>> {
    let tokens: Vec<String> = {
        let mut t = Vec::new();
        let mut cur = String::new();
        let mut chars = code.chars().peekable();
        while let Some(c) = chars.next() {
            if is_ident(c) {
                cur.push(c);
                continue;
            }
            if !cur.is_empty() {
                t.push(std::mem::take(&mut cur));
            }
            if c == ':' && chars.peek() == Some(&':') {
                chars.next();
                t.push("::".into());
            } else if "{},;".contains(c) {
                t.push(c.to_string());
            }
        }
        t
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        if !tokens[i].starts_with(is_ident) || (i > 0 && tokens[i - 1] == "::") {
            i += 1;
            continue;
        }
        let mut path = vec![tokens[i].clone()];
        let mut j = i + 1;
        while j + 1 < tokens.len() && tokens[j] == "::" && tokens[j + 1].starts_with(is_ident) {
            path.push(tokens[j + 1].clone());
            j += 2;
        }
        if j + 1 < tokens.len() && tokens[j] == "::" && tokens[j + 1] == "{" {
            // One level of braces: the first segment of each item.
            let mut k = j + 2;
            let mut depth = 0;
            let mut at_item = true;
            while k < tokens.len() {
                match tokens[k].as_str() {
                    "{" => depth += 1,
                    "}" if depth == 0 => break,
                    "}" => depth -= 1,
                    "," if depth == 0 => at_item = true,
                    t if at_item && depth == 0 && t.starts_with(is_ident) => {
                        let mut p = path.clone();
                        p.push(t.to_string());
                        out.push(p);
                        at_item = false;
                    }
                    _ => {}
                }
                k += 1;
            }
        }
        if path.len() > 1 {
            out.push(path);
        }
        i = j;
    }
    out
}

/// The module a path names from `module`, if it is one of ours: the longest module prefix.
fn target(module: &str, path: &[String], modules: &BTreeSet<String>) -> Option<String> {
    let here: Vec<&str> = module.split("::").collect();
    let (mut base, rest): (Vec<String>, &[String]) = match path[0].as_str() {
        "crate" => (vec!["crate".into()], &path[1..]),
        "self" => (here.iter().map(|s| s.to_string()).collect(), &path[1..]),
        "super" => {
            let mut b: Vec<String> = here.iter().map(|s| s.to_string()).collect();
            b.pop();
            (b, &path[1..])
        }
        // A relative path into a child module of this one.
        first => {
            let child = format!("{module}::{first}");
            if !modules.contains(&child) {
                return None;
            }
            (here.iter().map(|s| s.to_string()).collect(), path)
        }
    };
    let mut found = None;
    let prefix = base.join("::");
    if modules.contains(&prefix) {
        found = Some(prefix);
    }
    for seg in rest {
        if seg == "super" {
            base.pop();
        } else {
            base.push(seg.clone());
        }
        let m = base.join("::");
        if modules.contains(&m) {
            found = Some(m);
        } else if seg != "super" {
            break;
        }
    }
    found.filter(|m| m != module)
}

/// Module → the modules it names.
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.retain(|f| !f.ends_with("main.rs"));
    let by_module: BTreeMap<String, PathBuf> = files
        .iter()
        .filter_map(|f| Some((module_of(src, f)?, f.clone())))
        .collect();
    let modules: BTreeSet<String> = by_module.keys().cloned().collect();
    let mut edges = BTreeMap::new();
    for (module, file) in &by_module {
        let text = std::fs::read_to_string(file).expect("read source");
        let to: BTreeSet<String> = paths(&code_of(&text))
            .iter()
            .filter_map(|p| target(module, p, &modules))
            .collect();
        edges.insert(module.clone(), to);
    }
    edges
}

/// A cycle through the graph, if there is one, as the modules along it.
fn find_cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        m: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|s| s == m) {
            let mut cycle = stack[at..].to_vec();
            cycle.push(m.to_string());
            return Some(cycle);
        }
        if done.contains(m) {
            return None;
        }
        stack.push(m.to_string());
        for next in edges.get(m).into_iter().flatten() {
            if let Some(c) = visit(next, edges, stack, done) {
                return Some(c);
            }
        }
        stack.pop();
        done.insert(m.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for m in edges.keys() {
        if let Some(c) = visit(m, edges, &mut Vec::new(), &mut done) {
            return Some(c);
        }
    }
    None
}

#[test]
fn controller_modules_import_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let edges = graph(&src);
    assert!(
        edges.len() > 20,
        "the source tree was read: {:?}",
        edges.keys()
    );
    assert!(
        edges["crate::rollout::act"].contains("crate::rollout::progressive"),
        "the reader sees the loop's calls into the progressive strategy: {:?}",
        edges["crate::rollout::act"]
    );
    if let Some(cycle) = find_cycle(&edges) {
        panic!("import cycle: {}", cycle.join(" -> "));
    }
}

#[test]
fn the_reader_finds_cycles_and_paths() {
    let code = code_of(
        "use super::{Carry, Rollout};\nuse crate::a::b::{self, C};\n// crate::x::y\nlet s = \"crate::q::r\";\nlet t = r#\"crate::q::\"r\"#; let c = '\"';\nfoo::bar(1);\n",
    );
    let p = paths(&code);
    let has = |want: &[&str]| p.iter().any(|x| x == want);
    assert!(
        has(&["super", "Carry"]) && has(&["super", "Rollout"]),
        "{p:?}"
    );
    assert!(
        has(&["crate", "a", "b"]) && has(&["crate", "a", "b", "C"]),
        "{p:?}"
    );
    assert!(has(&["foo", "bar"]), "{p:?}");
    assert!(
        !p.iter()
            .any(|x| x.contains(&"x".to_string()) || x.contains(&"q".to_string()))
    );

    let mods: BTreeSet<String> = ["crate", "crate::r", "crate::r::k", "crate::r::p"]
        .map(String::from)
        .into();
    let seg = |s: &str| s.split("::").map(String::from).collect::<Vec<_>>();
    assert_eq!(
        target("crate::r::k", &seg("super::Rollout"), &mods),
        Some("crate::r".into())
    );
    assert_eq!(
        target("crate::r::k", &seg("super::p::f"), &mods),
        Some("crate::r::p".into())
    );
    assert_eq!(
        target("crate::r", &seg("k::f"), &mods),
        Some("crate::r::k".into())
    );
    assert_eq!(target("crate::r", &seg("serde::Value"), &mods), None);

    let edges: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec![]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(
        find_cycle(&edges),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    let mut acyclic = edges.clone();
    acyclic.insert("c".into(), BTreeSet::new());
    assert_eq!(find_cycle(&acyclic), None);
}

/// Functions of `text` longer than `max` lines whose doc comment does not say why they are
/// long (`(Long: …)`), as (line, name, length).
fn long_functions(text: &str, max: usize) -> Vec<(usize, String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let head = trimmed
            .trim_start_matches("pub(crate) ")
            .trim_start_matches("pub(super) ")
            .trim_start_matches("pub ")
            .trim_start_matches("async ");
        let Some(rest) = head.strip_prefix("fn ") else {
            continue;
        };
        let name: String = rest.chars().take_while(|c| is_ident(*c)).collect();
        let close = format!("{}}}", " ".repeat(indent));
        let Some(len) = lines[i..].iter().position(|l| *l == close) else {
            continue;
        };
        let doc = lines[..i]
            .iter()
            .rev()
            .take_while(|l| l.trim_start().starts_with("///") || l.trim_start().starts_with("#["))
            .any(|l| l.contains("(Long:"));
        if len + 1 > max && !doc {
            out.push((i + 1, name, len + 1));
        }
    }
    out
}

#[test]
fn long_functions_in_rollout_say_why() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/rollout");
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    assert!(files.len() >= 5, "rollout/ was read: {files:?}");
    let mut unexplained = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("read source");
        let text = text
            .split("#[cfg(test)]\nmod tests")
            .next()
            .unwrap_or_default();
        for (line, name, len) in long_functions(text, 80) {
            unexplained.push(format!("{}:{line} {name}: {len} lines", f.display()));
        }
    }
    assert!(
        unexplained.is_empty(),
        "functions over 80 lines in rollout/ without a doc line saying why (\"(Long: ...)\"):\n{}",
        unexplained.join("\n")
    );
    let sample = "fn short() {\n}\n\nfn long() {\n".to_string() + &"    x;\n".repeat(90) + "}\n";
    assert_eq!(
        long_functions(&sample, 80).len(),
        1,
        "a long function is seen"
    );
    let explained = sample.replace("fn long()", "/// (Long: a reason.)\nfn long()");
    assert!(
        long_functions(&explained, 80).is_empty(),
        "its reason is read"
    );
}

/// Documents and sources a comment cites (`docs/strategies.md`, `rollout/placement.rs`,
/// `status_hold.rs`) that `exists` does not find: `(line, cited)`. Comments are the lines that
/// start with `//` (doc comments included).
fn missing_citations(
    text: &str,
    exists: &dyn Fn(&str) -> bool,
    exts: &[&str],
) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let Some(comment) = line.trim_start().strip_prefix("//") else {
            continue;
        };
        let words = comment.split_whitespace();
        // A web address is not a citation of the repository.
        for word in words.filter(|w| !w.contains("://")) {
            for token in word
                .split(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/')))
            {
                let token = token.trim_end_matches('.');
                let cited = exts.iter().any(|e| {
                    token
                        .strip_suffix(e)
                        .is_some_and(|stem| stem.ends_with('.') && stem.len() > 1)
                });
                if cited && !exists(token) {
                    out.push((i + 1, token.to_string()));
                }
            }
        }
    }
    out
}

/// Test names that number sections of a document (`a14_promotes`) rather than say what they
/// check.
fn section_numbered_tests(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    // A test: an attribute naming `test` among those right above the function.
    let is_test = |i: usize| {
        lines[..i]
            .iter()
            .rev()
            .map(|l| l.trim_start())
            .take_while(|l| l.starts_with("#[") || l.starts_with("///"))
            .any(|l| l.starts_with("#[") && l.contains("test"))
    };
    lines
        .iter()
        .enumerate()
        .filter(|(i, _)| is_test(*i))
        .filter_map(|(_, l)| {
            let l = l.trim_start();
            l.strip_prefix("async fn ")
                .or_else(|| l.strip_prefix("fn "))
        })
        .filter_map(|rest| rest.split('(').next())
        .filter(|name| {
            let mut chars = name.chars();
            chars.next().is_some_and(|c| c.is_ascii_lowercase())
                && name.split('_').next().is_some_and(|head| {
                    head.len() > 1 && head[1..].chars().all(|c| c.is_ascii_digit())
                })
        })
        .map(str::to_string)
        .collect()
}

const CITED_EXTENSIONS: [&str; 2] = ["md", "rs"];

#[test]
fn comments_and_test_names_cite_only_what_the_repository_has() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    rust_files(&root.join("crates"), &mut files);
    rust_files(&root.join("dataplane"), &mut files);
    files.retain(|f| !f.components().any(|c| c.as_os_str() == "target"));
    assert!(files.len() > 100, "the sources were read: {}", files.len());
    // Every file of the repository, by its path from the root.
    let mut paths = BTreeSet::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).expect("read dir").flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if p.is_dir() {
                if !name.starts_with('.') && name != "target" {
                    stack.push(p);
                }
            } else if let Ok(rel) = p.strip_prefix(&root) {
                paths.insert(format!("/{}", rel.display()));
            }
        }
    }
    // A citation is a path from the root, or the end of one (`rollout/mod.rs`, `status_hold.rs`).
    let exists = |cited: &str| {
        let cited = format!("/{}", cited.trim_start_matches("./"));
        paths.iter().any(|p| p.ends_with(&cited))
    };
    let mut problems = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read source");
        let shown = file.strip_prefix(&root).unwrap_or(file).display();
        for (line, cited) in missing_citations(&text, &exists, &CITED_EXTENSIONS) {
            problems.push(format!(
                "{shown}:{line}: cites {cited}, which the repository lacks"
            ));
        }
        for name in section_numbered_tests(&text) {
            problems.push(format!(
                "{shown}: fn {name} numbers a section instead of saying what it checks"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_citation_check_catches_what_it_is_for() {
    let exists = |c: &str| c == "docs/strategies.md" || c == "status_hold.rs";
    // The missing names are put together here, so that this file cites none of them itself.
    let doc = |stem: &str| format!("{stem}.{}", CITED_EXTENSIONS[0]);
    let (gone, lost) = (doc("gone"), doc("lost"));
    let text = [
        "/// see docs/strategies.md and status_hold.rs.".to_string(),
        format!("    // as {gone} says ({lost}, section 3)"),
        format!("let url = \"{gone}\"; // {lost}"),
        format!("//! https://example.com/{gone}, a version 1.8.1 and e.g. words."),
    ]
    .join("\n");
    assert_eq!(
        missing_citations(&text, &exists, &CITED_EXTENSIONS),
        [(2, gone.clone()), (2, lost.clone())]
    );
    assert_eq!(
        section_numbered_tests(
            "#[test]\nfn a14_promotes() {}\n#[test]\nfn a_pipeline_drains() {}\n\
             #[tokio::test]\nasync fn s3_x() {}\nfn v1() {}\n"
        ),
        ["a14_promotes", "s3_x"]
    );
}
