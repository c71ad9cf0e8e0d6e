//! The controller binary's command line: every flag documented, reference flags accepted (or,
//! when this binary cannot honour them, refused at start-up), and a missing or unreachable
//! cluster reported in one line with a failing exit code.

use std::process::Command;

fn numaplane(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_numaplane"))
        .args(args)
        .env_remove("KUBECONFIG")
        .output()
        .expect("run numaplane")
}

#[test]
fn help_documents_every_flag() {
    let out = numaplane(&["--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--metrics-bind-address",
        "--health-probe-bind-address",
        "--leader-elect",
        "--metrics-secure",
        "--enable-http2",
        "--kubeconfig",
        "--config-file",
        "--namespace",
        "--watch-namespace",
        "--workers",
    ] {
        assert!(help.contains(flag), "{flag} missing from --help:\n{help}");
    }
}

/// A kubeconfig for an API server that is not there (a port nothing listens on).
fn unreachable_kubeconfig(dir: &std::path::Path) -> std::path::PathBuf {
    let kubeconfig = dir.join("kubeconfig");
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: 'https://127.0.0.1:{port}', insecure-skip-tls-verify: true}}\n\
             users:\n- name: u\n  user: {{token: t}}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n"
        ),
    )
    .expect("kubeconfig");
    kubeconfig
}

#[test]
fn unreachable_cluster_is_one_clear_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = unreachable_kubeconfig(dir.path());
    let out = numaplane(&[
        "--kubeconfig",
        kubeconfig.to_str().expect("path"),
        "--leader-elect",
        // Off, as the reference defaults it: accepted.
        "--metrics-secure=false",
        "--enable-http2",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("numaplane:"))
        .collect();
    assert_eq!(lines.len(), 1, "one error line:\n{err}");
    assert!(
        lines[0].contains("cannot reach the Kubernetes API server"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");

    let missing = numaplane(&["--kubeconfig", "/nonexistent/kubeconfig"]);
    assert_eq!(missing.status.code(), Some(1));
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(
        err.contains("reading kubeconfig /nonexistent/kubeconfig"),
        "{err}"
    );
}

/// `--metrics-secure` asks for HTTPS metrics behind TokenReview/SubjectAccessReview; this binary
/// serves plain HTTP, so it refuses to start (exit 2, the flag named, the cluster never
/// contacted) instead of silently leaving the metrics unprotected.
#[test]
fn metrics_secure_is_refused_not_ignored() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = unreachable_kubeconfig(dir.path());
    for flag in ["--metrics-secure", "--metrics-secure=true"] {
        let out = numaplane(&["--kubeconfig", kubeconfig.to_str().expect("path"), flag]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag}: {err}");
        assert!(
            err.contains("numaplane: --metrics-secure is not supported")
                && err.contains("plain HTTP")
                && err.contains("TokenReview/SubjectAccessReview"),
            "{flag}: {err}"
        );
        assert!(
            !err.contains("cannot reach"),
            "{flag}: refused before contacting the cluster: {err}"
        );
    }
}
