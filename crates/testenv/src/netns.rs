//! A process in its own network and mount namespaces, as if it ran in a pod: it sees only its
//! loopback, an `/etc/hosts` we write (so in-cluster names such as
//! `<pipeline>-daemon-svc.<ns>.svc` resolve to 127.0.0.1), directories bind-mounted where a
//! container would have its volumes, and the ports we forward into it (the API server, a daemon
//! stand-in, Prometheus).
//!
//! Why namespaces: the Numaflow controller reads its configuration only from a fixed path and
//! binds fixed ports, so two of them (two namespaces, or an upgrade's old and new binaries) can
//! only run side by side this way. Root is enough (`unshare -m -n`); no container runtime.
//!
//! Forwarding needs no helper inside the namespace: a thread of this process enters the
//! namespace (`setns`), binds the listeners there and leaves; sockets keep the namespace they were
//! made in, so connections accepted inside are relayed to host addresses by plain threads.

use std::fs;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// A port inside the namespace relayed to an address of the host.
#[derive(Debug, Clone)]
pub struct Forward {
    /// Where it listens inside: loopback for the process itself; every address when pods
    /// behind the namespace's own bridge must reach it too.
    pub bind: Ipv4Addr,
    pub port: u16,
    pub to: SocketAddr,
}

impl Forward {
    /// `port` on the namespace's loopback, relayed to `to`.
    pub fn local(port: u16, to: impl Into<SocketAddr>) -> Self {
        Forward {
            bind: Ipv4Addr::LOCALHOST,
            port,
            to: to.into(),
        }
    }
}

/// What to run and what it sees.
#[derive(Debug, Clone, Default)]
pub struct PodSpec {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// `(directory on the host, path inside)`.
    pub mounts: Vec<(PathBuf, String)>,
    /// Names resolving to 127.0.0.1 inside; more can be added later with [`Pod::set_hosts`].
    pub hosts: Vec<String>,
    pub forwards: Vec<Forward>,
}

/// A running namespaced process. Dropping it kills its process group and stops its relays.
pub struct Pod {
    child: Child,
    hosts_file: PathBuf,
    stop: Arc<AtomicBool>,
    pub log: PathBuf,
}

const START_TIMEOUT: Duration = Duration::from_secs(10);

impl Pod {
    /// Starts `spec` with its state (script, hosts file, log) in `dir`. Its process group is
    /// appended to `pids`, the file the control plane's watchdog kills on exit.
    pub fn start(dir: &Path, pids: &Path, name: &str, spec: &PodSpec) -> Result<Self> {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let hosts_file = dir.join(format!("{name}.hosts"));
        write_hosts(&hosts_file, &spec.hosts)?;
        let ready = dir.join(format!("{name}.ready"));
        let _ = fs::remove_file(&ready);
        let log = dir.join(format!("{name}.log"));
        let mut script = String::from("set -e\nip link set lo up\n");
        script.push_str(&format!("mount --bind {} /etc/hosts\n", quote(&hosts_file)));
        for (src, target) in &spec.mounts {
            // The mount point must exist; on the shared filesystem it stays an empty directory.
            script.push_str(&format!(
                "mkdir -p {t}\nmount --bind {s} {t}\n",
                s = quote(src),
                t = quote(Path::new(target))
            ));
        }
        script.push_str(&format!(
            "while [ ! -e {r} ]; do sleep 0.02; done\nexec {p}",
            r = quote(&ready),
            p = quote(&spec.program)
        ));
        for a in &spec.args {
            script.push(' ');
            script.push_str(&quote(Path::new(a)));
        }
        script.push('\n');
        let script_path = dir.join(format!("{name}.sh"));
        fs::write(&script_path, script)?;
        // Appended to: a process started again after it exited keeps its predecessor's log.
        let out = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)?;
        let mut cmd = Command::new("unshare");
        cmd.args(["--mount", "--net", "--propagation", "private", "sh"])
            .arg(&script_path)
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .process_group(0);
        let child = cmd
            .spawn()
            .context("starting `unshare` (util-linux; needs root)")?;
        {
            use std::io::Write as _;
            fs::OpenOptions::new()
                .append(true)
                .open(pids)
                .and_then(|mut f| writeln!(f, "{}", child.id()))
                .with_context(|| format!("recording a pid in {}", pids.display()))?;
        }
        let pod = Pod {
            child,
            hosts_file,
            stop: Arc::new(AtomicBool::new(false)),
            log,
        };
        let netns = pod.wait_for_netns()?;
        for f in &spec.forwards {
            let listener = bind_inside(&netns, f.bind, f.port)
                .with_context(|| format!("{name}: binding port {} inside", f.port))?;
            relay(listener, f.to, pod.stop.clone());
        }
        fs::write(&ready, b"")?;
        Ok(pod)
    }

    /// Replaces the names that resolve to 127.0.0.1 inside (written in place: the bind mount
    /// pins the file, and Go's resolver notices the new modification time within 5 s).
    pub fn set_hosts(&self, names: &[String]) -> Result<()> {
        write_hosts(&self.hosts_file, names)
    }

    /// The pid of the namespaced process (the shell, then the program it execs).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process still runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// `/proc/<pid>/ns/net` once `unshare` has moved the process into a namespace of its own.
    fn wait_for_netns(&self) -> Result<PathBuf> {
        let ours = fs::metadata("/proc/self/ns/net")?.ino();
        let path = PathBuf::from(format!("/proc/{}/ns/net", self.child.id()));
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if fs::metadata(&path).is_ok_and(|m| m.ino() != ours) {
                return Ok(path);
            }
            if Instant::now() > deadline {
                bail!(
                    "no network namespace of its own after {START_TIMEOUT:?}; log: {}",
                    fs::read_to_string(&self.log).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let pgid = self.child.id();
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{pgid}")])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.wait();
    }
}

fn write_hosts(path: &Path, names: &[String]) -> Result<()> {
    let mut text = String::from("127.0.0.1 localhost\n");
    for n in names {
        text.push_str(&format!("127.0.0.1 {n}\n"));
    }
    // In place (truncate and write), never rename: the bind mount follows the inode.
    fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

fn quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', r"'\''"))
}

/// Binds 127.0.0.1:`port` inside the namespace at `netns`, from a thread that enters it. Retries
/// while the namespace's loopback is still down.
fn bind_inside(netns: &Path, addr: Ipv4Addr, port: u16) -> Result<TcpListener> {
    let netns = netns.to_path_buf();
    std::thread::spawn(move || -> Result<TcpListener> {
        let fd = fs::File::open(&netns).with_context(|| format!("opening {}", netns.display()))?;
        nix::sched::setns(&fd, nix::sched::CloneFlags::CLONE_NEWNET).context("setns")?;
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            match TcpListener::bind((addr, port)) {
                Ok(l) => return Ok(l),
                Err(e)
                    if e.kind() == io::ErrorKind::AddrNotAvailable && Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => return Err(e.into()),
            }
        }
        // The thread ends here, and with it its membership of the namespace.
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the namespace thread panicked"))?
}

/// Accepts connections on `listener` and relays each to `to`, one pair of threads per
/// connection, until `stop` (polled: a blocked accept could not see it, and the listener would
/// keep the namespace alive).
fn relay(listener: TcpListener, to: SocketAddr, stop: Arc<AtomicBool>) {
    std::thread::spawn(move || {
        if listener.set_nonblocking(true).is_err() {
            return;
        }
        while !stop.load(Ordering::Relaxed) {
            let inside = match listener.accept() {
                Ok((c, _)) => c,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                }
                Err(_) => {
                    // Out of descriptors or similar: back off rather than spin.
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                }
            };
            if inside.set_nonblocking(false).is_err() {
                continue;
            }
            let Ok(outside) = TcpStream::connect(to) else {
                continue;
            };
            let _ = inside.set_nodelay(true);
            let _ = outside.set_nodelay(true);
            pipe(&inside, &outside);
            pipe(&outside, &inside);
        }
    });
}

fn pipe(from: &TcpStream, to: &TcpStream) {
    let (Ok(mut from), Ok(mut to)) = (from.try_clone(), to.try_clone()) else {
        return;
    };
    std::thread::spawn(move || {
        let _ = io::copy(&mut from, &mut to);
        let _ = to.shutdown(std::net::Shutdown::Both);
        let _ = from.shutdown(std::net::Shutdown::Both);
    });
}
