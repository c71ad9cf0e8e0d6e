//! The controller binary's command line: every flag documented, reference flags accepted, and
//! a missing or unreachable cluster reported in one line with a failing exit code.

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

#[test]
fn unreachable_cluster_is_one_clear_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
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
    let out = numaplane(&[
        "--kubeconfig",
        kubeconfig.to_str().expect("path"),
        "--leader-elect",
        "--metrics-secure",
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
