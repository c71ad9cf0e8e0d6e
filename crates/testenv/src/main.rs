//! `numaplane-testenv`: run the test environment (the control plane and, unless
//! `--control-plane-only`, the real stack: KWOK, the real Numaflow and Argo Rollouts controllers,
//! Prometheus and the data-plane stand-ins) for `make dev-up` or for manual work with kubectl.
//!
//! - `up --dir DIR` starts `serve` detached (own process group, output to `DIR/testenv.log`),
//!   waits until it is ready and exits; `DIR/kubeconfig` is the admin kubeconfig.
//! - `serve --dir DIR` runs everything in the foreground until SIGTERM or Ctrl-C.
//! - `down --dir DIR` stops what `up` started (pid in `DIR/serve.pid`) and removes its state,
//!   keeping the logs.

use std::fs::{self, File};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use numaplane_testenv::controlplane::tail;
use numaplane_testenv::{TestEnv, TestEnvOptions};
use tokio::signal::unix::{SignalKind, signal};

const PID_FILE: &str = "serve.pid";
const READY_FILE: &str = "ready";
const LOG_FILE: &str = "testenv.log";

#[derive(Parser)]
#[command(
    version,
    about = "A real Kubernetes control plane on loopback, with the real Numaflow and Argo Rollouts controllers"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start the control plane in the background and wait until it is ready.
    Up {
        #[command(flatten)]
        args: ServeArgs,
        /// How long to wait for readiness.
        #[arg(long, default_value_t = 180)]
        timeout_secs: u64,
    },
    /// Run the control plane in the foreground until SIGTERM or Ctrl-C.
    Serve {
        #[command(flatten)]
        args: ServeArgs,
    },
    /// Import an OCI image archive into the real node of an environment `up --real-node` started
    /// (for pods with `imagePullPolicy: Never`).
    ImportImage {
        /// The directory given to `up`.
        #[arg(long)]
        dir: PathBuf,
        /// The archive (`hack/realnode-binaries.sh` packs them; the image's name in index.json's
        /// `io.containerd.image.name` annotation).
        archive: PathBuf,
    },
    /// Push an OCI image archive into the real node's registry, from which the node pulls
    /// (any `imagePullPolicy`).
    PublishImage {
        /// The directory given to `up`.
        #[arg(long)]
        dir: PathBuf,
        /// The archive (the image's name in index.json's `io.containerd.image.name`).
        archive: PathBuf,
    },
    /// Stop what `up` started and remove its state (logs are kept).
    Down {
        /// The directory given to `up`.
        #[arg(long)]
        dir: PathBuf,
    },
}

#[derive(clap::Args)]
struct ServeArgs {
    /// State directory: kubeconfig, operator.kubeconfig, logs, certificates.
    #[arg(long)]
    dir: PathBuf,
    /// Also write an apiserver audit log here.
    #[arg(long)]
    audit_log: Option<PathBuf>,
    /// Only etcd, kube-apiserver and kube-controller-manager: no scheduler, KWOK, Numaflow or
    /// Argo Rollouts controller, Prometheus or stand-ins.
    #[arg(long)]
    control_plane_only: bool,
    /// Also run a real node (kubelet and containerd, label `type=real`, taint
    /// `numaplane.io/real-node=true:NoSchedule`); see docs/real-node.md.
    #[arg(long)]
    real_node: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Up { args, timeout_secs } => up(&args, Duration::from_secs(timeout_secs)),
        Cmd::Serve { args } => serve(args),
        Cmd::ImportImage { dir, archive } => numaplane_testenv::realnode::import_image_at(
            &dir.join(numaplane_testenv::realnode::KEPT_DIR),
            &archive,
        ),
        Cmd::PublishImage { dir, archive } => numaplane_testenv::realnode::publish_image_at(
            &dir.join(numaplane_testenv::realnode::KEPT_DIR),
            &archive,
        )
        .map(|name| println!("{name}")),
        Cmd::Down { dir } => down(&dir),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("numaplane-testenv: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn up(args: &ServeArgs, timeout: Duration) -> Result<()> {
    fs::create_dir_all(&args.dir).with_context(|| format!("creating {}", args.dir.display()))?;
    let dir = args.dir.canonicalize()?;
    if let Some(pid) = read_pid(&dir)?
        && alive(pid)
    {
        bail!(
            "already running (pid {pid}); run `numaplane-testenv down --dir {}` first",
            dir.display()
        );
    }
    let _ = fs::remove_file(dir.join(READY_FILE));
    let log_path = dir.join(LOG_FILE);
    let log =
        File::create(&log_path).with_context(|| format!("creating {}", log_path.display()))?;
    let mut cmd = Command::new(std::env::current_exe().context("locating this executable")?);
    cmd.arg("serve").arg("--dir").arg(&dir);
    if let Some(audit) = &args.audit_log {
        cmd.arg("--audit-log").arg(std::path::absolute(audit)?);
    }
    if args.control_plane_only {
        cmd.arg("--control-plane-only");
    }
    if args.real_node {
        cmd.arg("--real-node");
    }
    // Own process group and no terminal streams: `serve` outlives this process and the shell.
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .context("starting `numaplane-testenv serve`")?;
    fs::write(dir.join(PID_FILE), child.id().to_string())?;

    let deadline = Instant::now() + timeout;
    loop {
        if dir.join(READY_FILE).exists() {
            println!("{}", dir.join("kubeconfig").display());
            eprintln!(
                "control plane up (pid {}); export KUBECONFIG={}",
                child.id(),
                dir.join("kubeconfig").display()
            );
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            let _ = fs::remove_file(dir.join(PID_FILE));
            bail!(
                "serve exited ({status}); last lines of {}:\n{}",
                log_path.display(),
                tail(&log_path, 40)
            );
        }
        if Instant::now() > deadline {
            let _ = signal_pid(child.id(), "TERM");
            bail!(
                "not ready within {timeout:?}; last lines of {}:\n{}",
                log_path.display(),
                tail(&log_path, 40)
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[tokio::main]
async fn serve(args: ServeArgs) -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,numaplane_testenv=debug".into()),
        )
        .with_writer(std::io::stderr)
        // stderr is DIR/testenv.log when started by `up`.
        .with_ansi(false)
        .init();
    let mut term = signal(SignalKind::terminate())?;
    let dir = std::path::absolute(&args.dir)?;
    let opts = TestEnvOptions {
        audit_log: args.audit_log,
        dir: Some(dir.clone()),
        real_stack: !args.control_plane_only,
        real_node: args.real_node,
        ..TestEnvOptions::default()
    };
    let env = TestEnv::start_with(opts).await?;
    fs::write(dir.join(READY_FILE), format!("{}\n", env.apiserver_url()))?;
    tracing::info!(url = env.apiserver_url(), kubeconfig = %env.kubeconfig_path().display(), "ready");

    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tracing::info!("shutting down");
    drop(env);
    let _ = fs::remove_file(dir.join(READY_FILE));
    Ok(())
}

fn down(dir: &Path) -> Result<()> {
    if let Some(pid) = read_pid(dir)? {
        if alive(pid) {
            signal_pid(pid, "TERM")?;
            let deadline = Instant::now() + Duration::from_secs(30);
            while alive(pid) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
            if alive(pid) {
                // Its watchdog still kills the control plane when it dies.
                signal_pid(pid, "KILL")?;
            }
        }
    } else {
        eprintln!("nothing running in {} (no {PID_FILE})", dir.display());
    }
    for f in [
        PID_FILE,
        READY_FILE,
        "kubeconfig",
        "operator.kubeconfig",
        "tokens.csv",
        "pids",
        "audit-policy.yaml",
    ] {
        let _ = fs::remove_file(dir.join(f));
    }
    for d in ["pki", "etcd-data", "cleanup.d"] {
        let _ = fs::remove_dir_all(dir.join(d));
    }
    // A real node's bulk, if `serve` was killed before dropping it; its logs stay.
    let node = dir.join(numaplane_testenv::realnode::KEPT_DIR);
    for d in numaplane_testenv::realnode::HEAVY_DIRS {
        let _ = fs::remove_dir_all(node.join(d));
    }
    Ok(())
}

fn read_pid(dir: &Path) -> Result<Option<u32>> {
    match fs::read_to_string(dir.join(PID_FILE)) {
        Ok(s) => {
            Ok(Some(s.trim().parse().with_context(|| {
                format!("bad pid in {PID_FILE}: {s:?}")
            })?))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).context(format!("reading {PID_FILE}")),
    }
}

/// Sends a signal with kill(1): the crate forbids the `unsafe` a libc call would need.
fn signal_pid(pid: u32, sig: &str) -> Result<()> {
    let status = Command::new("kill")
        .args(["-s", sig, &pid.to_string()])
        .stderr(Stdio::null())
        .status()
        .context("running kill")?;
    if !status.success() && alive(pid) {
        bail!("kill -s {sig} {pid} failed ({status})");
    }
    Ok(())
}

fn alive(pid: u32) -> bool {
    Command::new("kill")
        .args(["-s", "0", &pid.to_string()])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
