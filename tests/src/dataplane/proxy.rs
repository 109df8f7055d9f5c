//! An HAProxy master and its workers in a private mount namespace whose resolv.conf names the counting DNS server.

use super::*;

/// An HAProxy master (`-W`, in the foreground) and its workers, run in a private mount
/// namespace whose `/etc/resolv.conf` names `nameserver` only. Its directory holds the
/// config, the map files, the stats socket and HAProxy's output; every process and the
/// directory go when it is dropped.
#[derive(Debug)]
pub struct Proxy {
    pub(super) dir: tempfile::TempDir,
    pub https: SocketAddr,
    pub(super) master: Option<Child>,
}

impl Proxy {
    pub fn new(nameserver: Ipv4Addr) -> Proxy {
        let dir = tempfile::Builder::new()
            .prefix("autoproxy-dataplane-")
            .tempdir()
            .expect("temp dir");
        std::fs::write(
            dir.path().join("resolv.conf"),
            format!("nameserver {nameserver}\n"),
        )
        .expect("write resolv.conf");
        Proxy {
            dir,
            https: SocketAddr::from((Ipv4Addr::LOCALHOST, free_port())),
            master: None,
        }
    }

    /// The addresses map autoproxy-resolver keeps, beside the config.
    pub fn addresses_map(&self) -> PathBuf {
        self.dir().join(MapFiles::stable().addresses.as_str())
    }

    /// Render options for an unprivileged HAProxy on loopback (maxconn stays within the FD
    /// limit here).
    pub fn options(&self, backend_port: u16) -> RenderOptions {
        let local = |port| SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        crate::proxy::loopback_options(
            [self.https, local(free_port()), local(free_port())],
            &self.stats_socket(),
            backend_port,
        )
    }

    /// Installs `config` with its map files beside it, as the apply document does.
    pub fn install(&self, config: &str) {
        crate::proxy::install_config(self.dir(), config);
    }

    /// `haproxy` with `args`, in the private mount namespace.
    pub(super) fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new("unshare");
        command
            .args([
                "-m",
                "sh",
                "-c",
                "mount --bind \"$1\" /etc/resolv.conf && shift && exec haproxy \"$@\"",
                "sh",
            ])
            .arg(self.dir().join("resolv.conf"))
            .args(args)
            .current_dir(self.dir())
            .stdin(Stdio::null());
        command
    }

    /// `haproxy -c` on the installed config: wall time, and whether it is valid.
    pub fn check(&self) -> (Duration, bool, String) {
        let config = self.config_path().display().to_string();
        let started = Instant::now();
        let output = self
            .command(&["-c", "-f", &config])
            .output()
            .expect("run unshare + haproxy -c");
        let took = started.elapsed();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        (took, output.status.success(), text)
    }

    /// Starts the master on the installed config; the time until `target` is routed.
    pub fn start(&mut self, target: &Target, timeout: Duration) -> Duration {
        assert!(self.master.is_none(), "already started");
        let config = self.config_path().display().to_string();
        let master_socket = self.master_socket().display().to_string();
        let log = std::fs::File::create(self.dir().join("haproxy.log")).expect("haproxy.log");
        let started = Instant::now();
        let child = self
            .command(&["-W", "-S", &master_socket, "-f", &config])
            .stdout(log.try_clone().expect("clone the log file"))
            .stderr(log)
            .spawn()
            .expect("start unshare + haproxy");
        self.master = Some(child);
        loop {
            if matches!(probe(self.https, &target.sni), Ok(ref b) if *b == target.banner) {
                return started.elapsed();
            }
            assert!(
                started.elapsed() < timeout,
                "HAProxy did not route {} within {timeout:?}:\n{}",
                target.sni,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// HAProxy's own output.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir().join("haproxy.log")).unwrap_or_default()
    }

    pub fn master_pid(&self) -> u32 {
        self.master.as_ref().expect("started").id()
    }

    /// `kill -USR2` to the master; the time until a new worker answers, or `None` after
    /// `timeout`. Returns once the master has taken that worker in, ready for the next reload.
    pub fn reload(&self, timeout: Duration) -> Option<Duration> {
        let old = self.worker_pid();
        let started = Instant::now();
        let status = Command::new("kill")
            .args(["-USR2", &self.master_pid().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -USR2 failed");
        let mut answered = None;
        while started.elapsed() < timeout {
            match (answered, self.worker_pid()) {
                (None, Some(now)) if Some(now) != old => {
                    answered = Some((now, started.elapsed()));
                }
                (Some((worker, took)), _) if self.master_has_taken_in(worker) => return Some(took),
                _ => {}
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        None
    }

    /// Stops the master and every worker: TERM, then KILL what is left after 3 s.
    pub fn stop(&mut self) {
        let Some(mut master) = self.master.take() else {
            return;
        };
        let pid = master.id();
        let workers = children(pid);
        let _ = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline && !matches!(master.try_wait(), Ok(Some(_))) {
            std::thread::sleep(Duration::from_millis(20));
        }
        if !matches!(master.try_wait(), Ok(Some(_))) {
            let _ = master.kill();
            let _ = master.wait();
        }
        for worker in workers {
            if stat_fields(worker).is_some() {
                let _ = Command::new("kill")
                    .args(["-KILL", &worker.to_string()])
                    .stderr(Stdio::null())
                    .status();
            }
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop();
    }
}

impl HaproxyFiles for Proxy {
    fn dir(&self) -> &Path {
        self.dir.path()
    }
}
