//! The controller image (`make image`, hack/image.sh, docs/image.md), built twice from this test
//! build's `numaplane` binary (so `make test` needs no release build; `make image` runs the same
//! script on the release binary): the two builds are byte-identical, the OCI config says what the
//! Dockerfile says, carries the labels and names the image the manifests install, and the binary
//! inside is the one built and runs as user 65532 on nothing but the Debian base.

use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const REPOSITORY: &str = "ghcr.io/numaproj/numaplane-rs";
const VERSION: &str = env!("CARGO_PKG_VERSION");
const BIN: &str = env!("CARGO_BIN_EXE_numaplane");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One build of the image: its archive, the manifest digest the script printed, the extracted
/// layout and the extracted root filesystem.
struct Build {
    archive: PathBuf,
    digest: String,
    layout: PathBuf,
    rootfs: PathBuf,
}

struct Builds {
    _dir: tempfile::TempDir,
    first: Build,
    second: Build,
}

fn build(dir: &Path, name: &str) -> Build {
    let out = dir.join(name);
    let stdout = run(Command::new(repo().join("hack/image.sh"))
        .env("NUMAPLANE_IMAGE_BIN", BIN)
        .env("NUMAPLANE_IMAGE_OUT", &out)
        .env_remove("SOURCE_DATE_EPOCH")
        .env_remove("NUMAPLANE_IMAGE_NAME"));
    let digest = stdout.lines().last().unwrap_or_default().to_string();
    let archive = out.join(format!("numaplane-{VERSION}.oci.tar"));
    let layout = out.join("layout");
    std::fs::create_dir_all(&layout).expect("layout dir");
    run(Command::new("tar")
        .arg("-xf")
        .arg(&archive)
        .arg("-C")
        .arg(&layout));
    let manifest = manifest(&layout);
    let layers = manifest["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), 1, "one layer: {manifest}");
    assert_eq!(
        layers[0]["mediaType"],
        "application/vnd.oci.image.layer.v1.tar+gzip"
    );
    let rootfs = out.join("rootfs");
    std::fs::create_dir_all(&rootfs).expect("rootfs dir");
    run(Command::new("tar")
        .arg("-xzf")
        .arg(blob_path(&layout, &layers[0]))
        .arg("-C")
        .arg(&rootfs));
    Build {
        archive,
        digest,
        layout,
        rootfs,
    }
}

/// Both builds, made once for all tests of this file (each build takes seconds).
fn builds() -> &'static Builds {
    static BUILDS: OnceLock<Builds> = OnceLock::new();
    BUILDS.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("image-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .expect("temp dir");
        let first = build(dir.path(), "first");
        let second = build(dir.path(), "second");
        Builds {
            _dir: dir,
            first,
            second,
        }
    })
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn blob_path(layout: &Path, descriptor: &Value) -> PathBuf {
    let digest = descriptor["digest"].as_str().expect("digest");
    let hex = digest.strip_prefix("sha256:").expect("sha256 digest");
    layout.join("blobs/sha256").join(hex)
}

fn index(layout: &Path) -> Value {
    read_json(&layout.join("index.json"))
}

fn manifest(layout: &Path) -> Value {
    let index = index(layout);
    let manifests = index["manifests"].as_array().expect("manifests");
    assert_eq!(manifests.len(), 1, "one manifest: {index}");
    read_json(&blob_path(layout, &manifests[0]))
}

fn config(layout: &Path) -> Value {
    read_json(&blob_path(layout, &manifest(layout)["config"]))
}

fn sha256(path: &Path) -> String {
    let out = run(Command::new("sha256sum").arg(path));
    out.split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_rebuild_gives_the_same_digest_and_the_same_archive() {
    let b = builds();
    assert!(
        b.first.digest.starts_with("sha256:") && b.first.digest.len() == 71,
        "the script prints the manifest digest last: {:?}",
        b.first.digest
    );
    assert_eq!(
        index(&b.first.layout)["manifests"][0]["digest"],
        b.first.digest.as_str()
    );
    assert_eq!(b.first.digest, b.second.digest, "manifest digests differ");
    assert_eq!(
        sha256(&b.first.archive),
        sha256(&b.second.archive),
        "the archives differ"
    );
    // Every blob is what its name says.
    for entry in std::fs::read_dir(b.first.layout.join("blobs/sha256")).expect("blobs") {
        let path = entry.expect("blob").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        assert_eq!(sha256(&path), name, "blob {name}");
    }
}

/// ENTRYPOINT, USER and EXPOSE of the Dockerfile's last stage.
fn dockerfile_runtime() -> (Vec<String>, String, BTreeSet<String>) {
    let text = std::fs::read_to_string(repo().join("Dockerfile")).expect("Dockerfile");
    let joined = text.replace("\\\n", " ");
    let last_stage: Vec<&str> = joined
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let from = last_stage
        .iter()
        .rposition(|l| l.to_ascii_uppercase().starts_with("FROM "))
        .expect("a FROM line");
    let (mut entrypoint, mut user, mut ports) = (Vec::new(), String::new(), BTreeSet::new());
    for line in &last_stage[from..] {
        let (instr, rest) = line.split_once(' ').unwrap_or((line, ""));
        match instr.to_ascii_uppercase().as_str() {
            "ENTRYPOINT" => {
                entrypoint = serde_json::from_str(rest.trim())
                    .unwrap_or_else(|e| panic!("ENTRYPOINT is not exec form ({e}): {line}"))
            }
            "USER" => user = rest.trim().to_string(),
            "EXPOSE" => ports.extend(rest.split_whitespace().map(|p| {
                if p.contains('/') {
                    p.to_string()
                } else {
                    format!("{p}/tcp")
                }
            })),
            _ => {}
        }
    }
    (entrypoint, user, ports)
}

#[test]
fn the_image_runs_what_the_dockerfile_says() {
    let (entrypoint, user, ports) = dockerfile_runtime();
    assert_eq!(entrypoint, ["/numaplane"], "the Dockerfile's ENTRYPOINT");
    let config = config(&builds().first.layout);
    let c = &config["config"];
    assert_eq!(c["Entrypoint"], serde_json::json!(entrypoint));
    assert_eq!(c["User"], user.as_str());
    let exposed: BTreeSet<String> = c["ExposedPorts"]
        .as_object()
        .expect("ExposedPorts")
        .keys()
        .cloned()
        .collect();
    assert_eq!(exposed, ports);
}

#[test]
fn the_config_names_version_revision_source_user_and_ports() {
    let layout = &builds().first.layout;
    let config = config(layout);
    let c = &config["config"];
    assert_eq!(c["User"], "65532:65532");
    assert_eq!(c["Entrypoint"], serde_json::json!(["/numaplane"]));
    assert_eq!(c["Cmd"], Value::Null, "no default arguments");
    assert_eq!(
        c["ExposedPorts"],
        serde_json::json!({"8080/tcp": {}, "8081/tcp": {}})
    );
    assert_eq!(config["os"], "linux");
    let labels = &c["Labels"];
    assert_eq!(labels["org.opencontainers.image.version"], VERSION);
    assert_eq!(labels["org.opencontainers.image.title"], "numaplane");
    let head = run(Command::new("git")
        .current_dir(repo())
        .args(["rev-parse", "HEAD"]));
    let revision = labels["org.opencontainers.image.revision"]
        .as_str()
        .expect("revision label");
    assert!(
        revision == head.trim() || revision == format!("{}-dirty", head.trim()),
        "revision {revision} is not the commit {head}"
    );
    let cargo = std::fs::read_to_string(repo().join("Cargo.toml")).expect("Cargo.toml");
    let source = labels["org.opencontainers.image.source"]
        .as_str()
        .expect("source label");
    assert!(
        source.starts_with("https://") && cargo.contains(&format!("repository = \"{source}\"")),
        "source {source} is the workspace repository"
    );
    // `created` is the commit time, not the build time.
    let commit_time = run(Command::new("git")
        .current_dir(repo())
        .env("TZ", "UTC")
        .args([
            "log",
            "-1",
            "--date=format-local:%Y-%m-%dT%H:%M:%SZ",
            "--format=%cd",
        ]));
    assert_eq!(config["created"], commit_time.trim());
    assert_eq!(
        config["history"][0]["created"],
        commit_time.trim(),
        "one history entry, for the layer"
    );
    let index = index(layout);
    let annotations = &index["manifests"][0]["annotations"];
    assert_eq!(
        annotations["org.opencontainers.image.ref.name"],
        format!("v{VERSION}")
    );
    assert_eq!(
        annotations["io.containerd.image.name"],
        format!("{REPOSITORY}:v{VERSION}")
    );
}

fn files_under(root: &Path, dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("dir entry").path();
        let meta = std::fs::symlink_metadata(&path).expect("metadata");
        if meta.is_dir() {
            files_under(root, &path, out);
        } else if let Ok(rel) = path.strip_prefix(root) {
            out.push(format!("/{}", rel.display()));
        }
    }
}

#[test]
fn the_binary_inside_is_the_one_built_and_runs_as_nonroot_on_the_debian_base() {
    let rootfs = &builds().first.rootfs;
    assert_eq!(
        sha256(&rootfs.join("numaplane")),
        sha256(Path::new(BIN)),
        "/numaplane is not the binary built"
    );
    let passwd = std::fs::read_to_string(rootfs.join("etc/passwd")).expect("/etc/passwd");
    assert!(
        passwd
            .lines()
            .any(|l| l.starts_with("nonroot:x:65532:65532:"))
    );
    let group = std::fs::read_to_string(rootfs.join("etc/group")).expect("/etc/group");
    assert!(group.lines().any(|l| l == "nonroot:x:65532:"));
    let bundle = std::fs::read_to_string(rootfs.join("etc/ssl/certs/ca-certificates.crt"))
        .expect("the CA bundle");
    assert!(bundle.matches("BEGIN CERTIFICATE").count() > 50);

    // Pruned: no shell, no other programs, no docs beyond the copyright notices.
    let mut files = Vec::new();
    files_under(rootfs, rootfs, &mut files);
    for f in &files {
        let allowed = f == "/numaplane"
            || f.starts_with("/etc/")
            || f.starts_with("/var/lib/dpkg/status.d/")
            || f == "/usr/lib/os-release"
            || f == "/usr/share/doc/libgcc-s1"
            || (f.starts_with("/usr/share/doc/") && f.ends_with("/copyright"))
            || ((f.starts_with("/lib") || f.starts_with("/usr/lib")) && f.contains(".so"));
        assert!(allowed, "{f} should not be in the image");
    }
    assert!(files.iter().any(|f| f.contains("libc.so.6")), "{files:?}");

    // Run it inside the root filesystem alone, as the image's user: every library it loads comes
    // from the Debian base. Without root, a user namespace maps the caller to root instead.
    let euid = run(Command::new("id").arg("-u")).trim().to_string();
    let mut cmd = if euid == "0" {
        let mut c = Command::new("chroot");
        c.arg("--userspec=65532:65532").arg(rootfs);
        c
    } else {
        let mut c = Command::new("unshare");
        c.args(["--map-root-user", "chroot"]).arg(rootfs);
        c
    };
    let version = run(cmd.args(["/numaplane", "--version"]));
    assert_eq!(version.trim(), format!("numaplane {VERSION}"));
}
