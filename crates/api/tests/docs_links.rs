//! The documentation must not point at things that are not there. For README.md,
//! CONTRIBUTING.md, docs/*.md and bench/*.md:
//!
//! - every relative link names an existing file, and every `#anchor` into a markdown file
//!   matches one of its headings (GitHub's slugs);
//! - every repository path in code (inline or fenced) that looks like a file exists: a path
//!   under a top-level entry of the repository (`crates/...`, `config/...`, `hack/...`) from the
//!   root, a relative source path (`tests/install.rs`, `rollout/mod.rs`) as the end of some file
//!   under `crates/`, a bare file name as the name of one;
//! - every `make <target>` is a target of the Makefile, every `kubectl numaplane <subcommand>`
//!   a subcommand of the plugin (read from the clap definitions in `crates/cli/src/cli.rs`), and
//!   every `cargo ... -p <package>` / `--test <test>` / `--example <example>` / `--bin <bin>`
//!   an existing package and target.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

/// The documentation files checked, as paths relative to the root.
fn doc_files(root: &Path) -> Vec<PathBuf> {
    let mut files = vec![PathBuf::from("README.md"), PathBuf::from("CONTRIBUTING.md")];
    for dir in ["docs", "bench"] {
        let mut md: Vec<PathBuf> = fs::read_dir(root.join(dir))
            .unwrap_or_else(|e| panic!("{dir}/: {e}"))
            .map(|e| e.expect("dir entry").path())
            .filter(|p| p.extension().is_some_and(|x| x == "md"))
            .map(|p| Path::new(dir).join(p.file_name().expect("file name")))
            .collect();
        md.sort();
        files.extend(md);
    }
    files
}

/// A markdown file split into what the checks need.
#[derive(Default)]
struct Parsed {
    /// Heading slugs, as GitHub makes them (duplicates get `-1`, `-2`, ...).
    anchors: BTreeSet<String>,
    /// (line, target) of every `[text](target)` outside code.
    links: Vec<(usize, String)>,
    /// (line, text) of every inline code span (newlines folded) and every fenced code line.
    code: Vec<(usize, String)>,
}

fn parse(text: &str) -> Parsed {
    let mut out = Parsed::default();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    // Prose keeps the line structure (fenced lines become empty) so offsets map to lines.
    let mut prose = String::new();
    let mut fence: Option<&str> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(marker) = fence {
            if trimmed.starts_with(marker) {
                fence = None;
            } else {
                out.code.push((i + 1, line.to_string()));
            }
            prose.push('\n');
            continue;
        }
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fence = Some(&trimmed[..3]);
            prose.push('\n');
            continue;
        }
        if let Some(h) = heading(line) {
            let base = slug(h);
            let n = seen.entry(base.clone()).or_insert(0);
            out.anchors.insert(if *n == 0 {
                base.clone()
            } else {
                format!("{base}-{n}")
            });
            *n += 1;
        }
        prose.push_str(line);
        prose.push('\n');
    }
    assert!(fence.is_none(), "an unclosed code fence");

    let line_at = |offset: usize| prose[..offset].matches('\n').count() + 1;
    let bytes = prose.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'`' {
            // A code span: a run of n backticks up to the next run of exactly n.
            let n = bytes[i..].iter().take_while(|&&b| b == b'`').count();
            let ticks = "`".repeat(n);
            let start = i + n;
            let mut j = start;
            let end = loop {
                match prose[j..].find(&ticks) {
                    Some(k) => {
                        let at = j + k;
                        let run = bytes[at..].iter().take_while(|&&b| b == b'`').count();
                        if run == n {
                            break Some(at);
                        }
                        j = at + run;
                    }
                    None => break None,
                }
            };
            match end {
                Some(end) => {
                    let span = prose[start..end].split_whitespace().collect::<Vec<_>>();
                    out.code.push((line_at(start), span.join(" ")));
                    i = end + n;
                }
                None => i = start,
            }
            continue;
        }
        if bytes[i..].starts_with(b"](") {
            let start = i + 2;
            if let Some(len) = prose[start..].find(')') {
                let target = prose[start..start + len].split_whitespace().next();
                if let Some(target) = target {
                    out.links.push((line_at(start), target.to_string()));
                }
                i = start + len;
                continue;
            }
        }
        i += 1;
    }
    out.code.sort_by_key(|(line, _)| *line);
    out
}

/// The text of an ATX heading line.
fn heading(line: &str) -> Option<&str> {
    let hashes = line.bytes().take_while(|&b| b == b'#').count();
    if !(1..=6).contains(&hashes) {
        return None;
    }
    let rest = &line[hashes..];
    if !rest.starts_with(' ') {
        return None;
    }
    Some(rest.trim().trim_end_matches('#').trim())
}

/// GitHub's anchor for a heading: lower case, letters, digits, `-`, `_` and spaces kept (spaces
/// become `-`), everything else (punctuation, backticks, emphasis) dropped.
fn slug(heading: &str) -> String {
    heading
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .flat_map(char::to_lowercase)
        .collect()
}

/// What the repository offers the checks.
struct Repo {
    root: PathBuf,
    /// Top-level entries a documented path may start with.
    top: BTreeSet<String>,
    /// Every file under `crates/`, relative to the root, with `/` separators.
    crate_files: Vec<String>,
    make_targets: BTreeSet<String>,
    subcommands: BTreeSet<String>,
    /// Package name → its test, example and bin targets.
    packages: BTreeMap<String, Targets>,
}

/// One kind of target of a package.
type TargetsOf = fn(&Targets) -> &BTreeSet<String>;

#[derive(Default, Debug)]
struct Targets {
    tests: BTreeSet<String>,
    examples: BTreeSet<String>,
    bins: BTreeSet<String>,
}

impl Repo {
    fn load(root: &Path) -> Repo {
        let top = fs::read_dir(root)
            .expect("read the root")
            .map(|e| {
                e.expect("dir entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            // Build output and local state directories are not the repository's.
            .filter(|n| n != "target" && (!n.starts_with('.') || n == ".ci" || n == ".github"))
            .collect();
        let mut crate_files = Vec::new();
        walk(root, Path::new("crates"), &mut crate_files);
        Repo {
            root: root.to_path_buf(),
            top,
            crate_files,
            make_targets: make_targets(
                &fs::read_to_string(root.join("Makefile")).expect("Makefile"),
            ),
            subcommands: subcommands(
                &fs::read_to_string(root.join("crates/cli/src/cli.rs")).expect("cli.rs"),
            ),
            packages: packages(root),
        }
    }
}

fn walk(root: &Path, rel: &Path, out: &mut Vec<String>) {
    for entry in fs::read_dir(root.join(rel)).expect("read dir") {
        let entry = entry.expect("dir entry");
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == "target" || name.starts_with('.') {
            continue;
        }
        let path = rel.join(&name);
        if entry.file_type().expect("file type").is_dir() {
            walk(root, &path, out);
        } else {
            out.push(path.to_string_lossy().replace('\\', "/"));
        }
    }
}

/// Rule targets of a Makefile: `a b: deps` lines, not variable assignments or special targets.
fn make_targets(makefile: &str) -> BTreeSet<String> {
    let mut targets = BTreeSet::new();
    for line in makefile.lines() {
        if line.starts_with(|c: char| c.is_whitespace() || c == '#' || c == '.') {
            continue;
        }
        let Some((head, rest)) = line.split_once(':') else {
            continue;
        };
        if rest.starts_with('=') || head.contains('=') || head.contains('$') {
            continue;
        }
        targets.extend(head.split_whitespace().map(str::to_string));
    }
    targets
}

/// The plugin's subcommands: the variants of `enum Command` in clap's kebab case, or the
/// `name`/`alias` their `#[command(...)]` attribute gives.
fn subcommands(cli_rs: &str) -> BTreeSet<String> {
    let start = cli_rs
        .find("pub enum Command {")
        .expect("`pub enum Command` in crates/cli/src/cli.rs");
    let body = &cli_rs[start..];
    let body = &body[..body.find("\n}").expect("the end of enum Command")];
    let mut names = BTreeSet::new();
    let mut attrs = String::new();
    for line in body.lines().skip(1) {
        let t = line.trim();
        if t.starts_with("#[") {
            attrs.push_str(t);
            continue;
        }
        if t.starts_with("//") || t.is_empty() {
            continue;
        }
        let variant: String = t.chars().take_while(|c| c.is_alphanumeric()).collect();
        if variant.starts_with(|c: char| c.is_ascii_uppercase()) {
            let renamed = quoted_after(&attrs, "name = ");
            names.insert(renamed.unwrap_or_else(|| kebab(&variant)));
            for key in ["alias = ", "visible_alias = "] {
                names.extend(quoted_after(&attrs, key));
            }
        }
        attrs.clear();
    }
    names
}

fn quoted_after(attrs: &str, key: &str) -> Option<String> {
    let at = attrs.find(key)? + key.len();
    let rest = attrs[at..].strip_prefix('"')?;
    Some(rest[..rest.find('"')?].to_string())
}

fn kebab(camel: &str) -> String {
    let mut out = String::new();
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('-');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

/// Every workspace package under `crates/` with its test, example and bin targets.
fn packages(root: &Path) -> BTreeMap<String, Targets> {
    let stems = |dir: &Path| -> BTreeSet<String> {
        let Ok(entries) = fs::read_dir(dir) else {
            return BTreeSet::new();
        };
        entries
            .map(|e| e.expect("dir entry").path())
            .filter_map(|p| {
                if p.extension().is_some_and(|x| x == "rs") {
                    Some(p.file_stem()?.to_string_lossy().into_owned())
                } else if p.join("main.rs").is_file() {
                    Some(p.file_name()?.to_string_lossy().into_owned())
                } else {
                    None
                }
            })
            .collect()
    };
    let mut out = BTreeMap::new();
    for entry in fs::read_dir(root.join("crates")).expect("crates/") {
        let dir = entry.expect("dir entry").path();
        let Ok(manifest) = fs::read_to_string(dir.join("Cargo.toml")) else {
            continue;
        };
        let mut name = None;
        let mut section = String::new();
        let mut targets = Targets {
            tests: stems(&dir.join("tests")),
            examples: stems(&dir.join("examples")),
            bins: stems(&dir.join("src/bin")),
        };
        for line in manifest.lines() {
            let t = line.trim();
            if t.starts_with('[') {
                section = t.to_string();
                continue;
            }
            let Some(value) = t.strip_prefix("name = ") else {
                continue;
            };
            let value = value.trim_matches('"').to_string();
            match section.as_str() {
                "[package]" => name = Some(value),
                "[[bin]]" => drop(targets.bins.insert(value)),
                "[[test]]" => drop(targets.tests.insert(value)),
                "[[example]]" => drop(targets.examples.insert(value)),
                _ => {}
            }
        }
        let name = name.unwrap_or_else(|| panic!("no [package] name in {}", dir.display()));
        if dir.join("src/main.rs").is_file() {
            targets.bins.insert(name.clone());
        }
        out.insert(name, targets);
    }
    out
}

/// A token as written in code, stripped of the punctuation around it.
fn clean(token: &str) -> &str {
    token
        .trim_start_matches(['(', '[', '"', '\'', '`'])
        .trim_end_matches([',', ';', ':', ')', ']', '"', '\'', '`', '.'])
}

const FILE_EXTENSIONS: [&str; 11] = [
    "rs", "yaml", "yml", "json", "toml", "sh", "md", "lua", "tsv", "png", "lock",
];

/// Checks one path-like token; `None` when it is not a path the documentation vouches for.
fn check_path(repo: &Repo, token: &str) -> Option<Result<(), String>> {
    let path_chars = |c: char| c.is_ascii_alphanumeric() || "_./-".contains(c);
    // Placeholders (`<n>`, `*`), variables, `../`, `...`, absolute paths and flags are not
    // repository paths.
    if token.is_empty()
        || !token.chars().all(path_chars)
        || token.contains("..")
        || token.starts_with(['/', '-'])
    {
        return None;
    }
    // A leading dot is a local state directory (`.dev/kubeconfig`, `--dir .rs`) unless it is a
    // top-level entry of the repository (`.ci/run`).
    if token.starts_with('.')
        && !token
            .split_once('/')
            .is_some_and(|(first, _)| repo.top.contains(first))
    {
        return None;
    }
    let extension = token
        .rsplit_once('.')
        .map(|(_, x)| x)
        .filter(|x| FILE_EXTENSIONS.contains(x));
    match token.split_once('/') {
        Some((first, _)) if repo.top.contains(first) => Some(if repo.root.join(token).exists() {
            Ok(())
        } else {
            Err(format!("`{token}` does not exist"))
        }),
        Some(_) if extension.is_some() => {
            let suffix = format!("/{token}");
            Some(if repo.crate_files.iter().any(|f| f.ends_with(&suffix)) {
                Ok(())
            } else {
                Err(format!("`{token}` is no file under crates/"))
            })
        }
        None if extension == Some("rs") => {
            let suffix = format!("/{token}");
            Some(if repo.crate_files.iter().any(|f| f.ends_with(&suffix)) {
                Ok(())
            } else {
                Err(format!("no file named `{token}` under crates/"))
            })
        }
        _ => None,
    }
}

#[derive(Default)]
struct Counts {
    links: usize,
    anchors: usize,
    paths: usize,
    make: usize,
    plugin: usize,
    cargo: usize,
}

/// Checks the code of one line or span; returns its problems.
fn check_code(repo: &Repo, code: &str, counts: &mut Counts) -> Vec<String> {
    let mut problems = Vec::new();
    let tokens: Vec<&str> = code.split_whitespace().map(clean).collect();
    for (i, &token) in tokens.iter().enumerate() {
        // An output path of a command (`--out bench/x.json`) names what a run writes, not a file
        // that must be there.
        if i > 0 && tokens[i - 1] == "--out" {
            continue;
        }
        if let Some(result) = check_path(repo, token) {
            counts.paths += 1;
            if let Err(e) = result {
                problems.push(e);
            }
        }
    }
    for (i, &token) in tokens.iter().enumerate() {
        let next = tokens[i + 1..].iter().copied();
        match token {
            "make" => {
                // `make [VAR=value]... target`
                let target = next.clone().find(|t| !t.contains('='));
                if let Some(target) =
                    target.filter(|t| t.starts_with(|c: char| c.is_ascii_lowercase()))
                {
                    counts.make += 1;
                    if !repo.make_targets.contains(target) {
                        problems.push(format!("`make {target}`: no such Makefile target"));
                    }
                }
            }
            "numaplane" if i > 0 && tokens[i - 1] == "kubectl" => {
                if let Some(sub) = tokens
                    .get(i + 1)
                    .filter(|t| t.starts_with(|c: char| c.is_ascii_lowercase()))
                {
                    counts.plugin += 1;
                    if !repo.subcommands.contains(*sub) {
                        problems.push(format!("`kubectl numaplane {sub}`: no such subcommand"));
                    }
                }
            }
            "cargo" => problems.extend(check_cargo(repo, &tokens[i + 1..], counts)),
            _ => {}
        }
    }
    problems
}

/// `cargo <command> [-p pkg] [--test t] [--example e] [--bin b] ...` up to `--` or a comment.
fn check_cargo(repo: &Repo, args: &[&str], counts: &mut Counts) -> Vec<String> {
    let args: Vec<&str> = args
        .iter()
        .copied()
        .take_while(|a| !matches!(*a, "--" | "#" | "&&" | "||" | "|" | ";"))
        .collect();
    let value = |flag: &[&str]| -> Vec<&str> {
        args.windows(2)
            .filter(|w| flag.contains(&w[0]))
            .map(|w| w[1])
            .filter(|v| !v.contains(['<', '$']))
            .collect()
    };
    let mut problems = Vec::new();
    let packages = value(&["-p", "--package"]);
    for p in &packages {
        counts.cargo += 1;
        if !repo.packages.contains_key(*p) {
            problems.push(format!("`cargo ... -p {p}`: no such package under crates/"));
        }
    }
    let scope: Vec<&Targets> = if packages.is_empty() {
        repo.packages.values().collect()
    } else {
        packages
            .iter()
            .filter_map(|p| repo.packages.get(*p))
            .collect()
    };
    let kinds: [(&str, TargetsOf); 3] = [
        ("--test", |t| &t.tests),
        ("--example", |t| &t.examples),
        ("--bin", |t| &t.bins),
    ];
    for (flag, of) in kinds {
        for name in value(&[flag]) {
            counts.cargo += 1;
            if !scope.iter().any(|t| of(t).contains(name)) {
                problems.push(format!(
                    "`cargo ... {flag} {name}`: no such target in {}",
                    if packages.is_empty() {
                        "the workspace".to_string()
                    } else {
                        packages.join(", ")
                    }
                ));
            }
        }
    }
    problems
}

#[test]
fn documentation_points_only_at_what_exists() {
    let root = root();
    let repo = Repo::load(&root);
    let files = doc_files(&root);
    assert!(files.len() >= 12, "too few documentation files: {files:?}");
    let parsed: BTreeMap<PathBuf, Parsed> = files
        .iter()
        .map(|f| {
            let text =
                fs::read_to_string(root.join(f)).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            (f.clone(), parse(&text))
        })
        .collect();

    let mut counts = Counts::default();
    let mut problems = Vec::new();
    for (file, doc) in &parsed {
        let dir = file.parent().unwrap_or(Path::new(""));
        for (line, target) in &doc.links {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            counts.links += 1;
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let linked = if path.is_empty() {
                file.clone()
            } else {
                normalize(&dir.join(path))
            };
            if !root.join(&linked).exists() {
                problems.push(format!(
                    "{}:{line}: link to missing `{target}`",
                    file.display()
                ));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            counts.anchors += 1;
            let anchors = match parsed.get(&linked) {
                Some(d) => d.anchors.clone(),
                None if linked.extension().is_some_and(|x| x == "md") => {
                    parse(&fs::read_to_string(root.join(&linked)).expect("linked markdown")).anchors
                }
                None => {
                    problems.push(format!(
                        "{}:{line}: anchor `#{anchor}` into a file that is not markdown",
                        file.display()
                    ));
                    continue;
                }
            };
            if !anchors.contains(anchor) {
                problems.push(format!(
                    "{}:{line}: `{target}`: no heading with anchor `#{anchor}` in {}",
                    file.display(),
                    linked.display()
                ));
            }
        }
        for (line, code) in &doc.code {
            for p in check_code(&repo, code, &mut counts) {
                problems.push(format!("{}:{line}: {p}", file.display()));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "the documentation points at things that do not exist:\n{}",
        problems.join("\n")
    );
    // The parser must have found what the documentation is known to hold; a scanner that
    // finds nothing would pass everything.
    let Counts {
        links,
        anchors,
        paths,
        make,
        plugin,
        cargo,
    } = counts;
    eprintln!(
        "checked {links} links ({anchors} anchors), {paths} paths, {make} make targets, \
         {plugin} plugin commands, {cargo} cargo packages and targets"
    );
    assert!(
        links >= 60 && anchors >= 25 && paths >= 150 && make >= 60 && plugin >= 25 && cargo >= 12,
        "too few checks: {links} links, {anchors} anchors, {paths} paths, {make} make targets, \
         {plugin} plugin commands, {cargo} cargo packages and targets"
    );
}

/// `a/./b/../c` → `a/c`, without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

#[test]
fn the_checks_catch_what_they_are_for() {
    let repo = Repo::load(&root());
    // The parsers of the repository's own definitions.
    for target in [
        "test",
        "demo",
        "dev-up",
        "bench",
        "bench-large",
        "chaos",
        "fuzz",
    ] {
        assert!(repo.make_targets.contains(target), "make {target}");
    }
    for sub in ["get", "allow-data-loss", "plan", "dashboard"] {
        assert!(repo.subcommands.contains(sub), "kubectl numaplane {sub}");
    }
    let controller = &repo.packages["numaplane"];
    assert!(controller.tests.contains("install") && controller.examples.contains("demo"));
    assert!(repo.packages["numaplane-api"].bins.contains("crdgen"));

    // Each check fails on what it is meant to catch, and passes its counterpart.
    let problems = |code: &str| check_code(&repo, code, &mut Counts::default());
    assert!(problems("kubectl apply -f config/install.yaml").is_empty());
    assert_eq!(problems("kubectl apply -f config/instal.yaml").len(), 1);
    assert!(problems("tests/install.rs and child_cache.rs").is_empty());
    assert_eq!(problems("tests/instal.rs").len(), 1);
    assert_eq!(problems("child_cach.rs").len(), 1);
    assert!(problems("make bench BENCH_ARGS=\"--n 100 --out bench/new.json\"").is_empty());
    assert_eq!(problems("make benchmark").len(), 1);
    assert!(problems("make FOO=1 demo").is_empty());
    assert!(problems("kubectl numaplane allow-data-loss my-pipeline --off").is_empty());
    assert_eq!(problems("kubectl numaplane rollback my-pipeline").len(), 1);
    assert!(problems("cargo test -p numaplane --test install -- --nocapture").is_empty());
    assert_eq!(problems("cargo test -p numaplane --test instal").len(), 1);
    assert_eq!(problems("cargo run -p numaplane-tstenv -- up").len(), 1);
    assert_eq!(problems("cargo test --test no_such_suite").len(), 1);

    let doc = parse(
        "# A `code` heading: yes\n\n## Twice\n\n## Twice\n\nSee [x](docs/a.md#b) and `p/q.rs`.\n\n\
         ```sh\nmake test\n```\n",
    );
    let anchors: Vec<&str> = doc.anchors.iter().map(String::as_str).collect();
    assert_eq!(anchors, ["a-code-heading-yes", "twice", "twice-1"]);
    assert_eq!(doc.links, [(7, "docs/a.md#b".to_string())]);
    let code: Vec<&str> = doc.code.iter().map(|(_, c)| c.as_str()).collect();
    assert_eq!(code, ["code", "p/q.rs", "make test"]);
}
