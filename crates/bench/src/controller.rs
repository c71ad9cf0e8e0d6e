//! The controller under test: the `numaplane` binary as its own process, authenticated as the
//! operator ServiceAccount, scoped to the benchmark namespace, with its probe and metrics ports.

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How to start the controller.
#[derive(Debug, Clone)]
pub struct Launch {
    pub binary: PathBuf,
    pub kubeconfig: PathBuf,
    pub config_file: PathBuf,
    pub namespace: String,
    pub workers: u16,
    pub log_dir: PathBuf,
}

pub struct Controller {
    child: Child,
    probe_port: u16,
    metrics_port: u16,
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

impl Controller {
    /// Starts the binary; `name` distinguishes the log files of successive runs.
    pub fn start(launch: &Launch, name: &str) -> Result<Self> {
        let (probe_port, metrics_port) = (free_port()?, free_port()?);
        let log = launch.log_dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log).with_context(|| format!("{}", log.display()))?;
        let child = Command::new(&launch.binary)
            .arg("--kubeconfig")
            .arg(&launch.kubeconfig)
            .arg("--config-file")
            .arg(&launch.config_file)
            .args(["--watch-namespace", &launch.namespace])
            .args(["--namespace", "numaplane-system"])
            .arg(format!("--workers={}", launch.workers))
            .arg(format!(
                "--health-probe-bind-address=127.0.0.1:{probe_port}"
            ))
            .arg(format!("--metrics-bind-address=127.0.0.1:{metrics_port}"))
            .env("POD_NAME", name)
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {}", launch.binary.display()))?;
        Ok(Self {
            child,
            probe_port,
            metrics_port,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until `/readyz` answers 200 (caches synced); fails if the process exits.
    pub async fn wait_ready(&mut self, timeout: Duration) -> Result<Duration> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!("numaplane exited before it was ready: {status}");
            }
            if http_get(self.probe_port, "/readyz").await.map(|(c, _)| c) == Some(200) {
                return Ok(start.elapsed());
            }
            if start.elapsed() > timeout {
                bail!("numaplane not ready after {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The Prometheus exposition.
    pub async fn metrics(&self) -> Result<String> {
        match http_get(self.metrics_port, "/metrics").await {
            Some((200, body)) => Ok(body),
            Some((code, _)) => bail!("/metrics answered {code}"),
            None => bail!("/metrics did not answer"),
        }
    }

    /// SIGKILL, as a crash or an evicted pod would end it.
    pub fn kill(&mut self) -> Result<()> {
        self.child.kill().context("killing numaplane")?;
        self.child.wait().context("reaping numaplane")?;
        Ok(())
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A minimal HTTP/1.0 GET on loopback: (status code, body).
async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let io = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut buf = String::new();
        s.read_to_string(&mut buf).await.ok()?;
        let code = buf.split_whitespace().nth(1)?.parse().ok()?;
        let body = buf.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
        Some((code, body))
    };
    tokio::time::timeout(Duration::from_secs(10), io)
        .await
        .ok()
        .flatten()
}

/// Writes the controller config: no-strategy (changes apply directly), INFO logs. A recyclable
/// pipeline that no drain emptied is deleted after 5 minutes instead of the default hour: a
/// force drain that timed out under the load of a mass upgrade waits for the next promoted
/// spec, which a benchmark run never brings, so the run would wait out the hour.
pub fn write_config(dir: &Path) -> Result<PathBuf> {
    let path = dir.join("config.yaml");
    std::fs::write(
        &path,
        "logLevel: INFO\ndefaultUpgradeStrategy: \"no-strategy\"\npipeline:\n  maxRecyclableDurationMinutes: 5\n",
    )?;
    Ok(path)
}
