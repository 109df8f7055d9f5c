//! Long-lived connections through the proxy: a backend that never ends its answer (a line
//! every 100 ms, like a Kubernetes watch) and a client that holds a connection to it and can
//! tell whether it still flows.

use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::proxy::Backend;

/// A backend on `ip:port` that writes `tick <n>` every 100 ms on each connection until the
/// client goes or the backend is dropped.
pub fn streamer(ip: Ipv4Addr, port: u16) -> std::io::Result<Backend> {
    let listener = TcpListener::bind((ip, port))?;
    Ok(Backend::serving(
        "streamer",
        listener,
        |mut stream, stop| {
            let mut tick = 0_u64;
            while !stop.load(Ordering::SeqCst)
                && stream
                    .write_all(format!("tick {tick}\n").as_bytes())
                    .is_ok()
            {
                tick += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
        },
    ))
}

/// A client holding a connection through the proxy's TLS frontend to a [`streamer`].
#[derive(Debug)]
pub struct Held {
    reader: BufReader<TcpStream>,
    /// Lines read so far.
    pub lines: usize,
}

impl Held {
    /// Connects to `proxy`, sends a ClientHello for `sni`, and reads the first line.
    pub fn open(proxy: SocketAddr, sni: &str) -> Result<Held, String> {
        let mut stream = TcpStream::connect_timeout(&proxy, Duration::from_secs(2))
            .map_err(|err| format!("connect to {proxy}: {err}"))?;
        stream
            .set_read_timeout(Some(Duration::from_secs(3)))
            .and_then(|()| stream.write_all(&crate::proxy::client_hello(sni)))
            .map_err(|err| format!("send the ClientHello: {err}"))?;
        let mut held = Held {
            reader: BufReader::new(stream),
            lines: 0,
        };
        held.alive()?;
        Ok(held)
    }

    /// Reads what arrived since the last call and one line more: `Ok` while the stream
    /// flows, else how it ended.
    pub fn alive(&mut self) -> Result<(), String> {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(n) if n > 0 && line.starts_with("tick ") => self.lines += 1,
            Ok(0) => return Err(format!("closed after {} lines", self.lines)),
            Ok(_) => return Err(format!("unexpected {line:?} after {} lines", self.lines)),
            Err(err) => return Err(format!("{err} after {} lines", self.lines)),
        }
        while self.reader.buffer().contains(&b'\n') {
            line.clear();
            self.reader
                .read_line(&mut line)
                .map_err(|err| err.to_string())?;
            self.lines += 1;
        }
        Ok(())
    }
}

/// A Kubernetes API server's watch stand-in (`tests/data/watch-apiserver.py`, TLS with a
/// throw-away self-signed certificate) and `kubectl` watching through the proxy: the client a
/// platform team's users run, with its own TLS and HTTP stack.
#[derive(Debug)]
pub struct KubectlWatch {
    server: std::process::Child,
    kubectl: std::process::Child,
    output: std::path::PathBuf,
    started: std::time::Instant,
    _dir: tempfile::TempDir,
}

/// How a [`KubectlWatch`] ended.
#[derive(Debug)]
pub struct WatchEnd {
    /// kubectl was still running when the server was asked to end its streams.
    pub survived: bool,
    /// kubectl's exit status after that (0: it read the stream to its clean end).
    pub status: Option<i32>,
    /// Watch events kubectl printed, and for how long it watched.
    pub events: usize,
    pub watched: Duration,
}

impl KubectlWatch {
    /// Starts the API server on `ip:port` and `kubectl get --raw '…?watch=true'` against
    /// `proxy`, sending `sni` (`tls-server-name`).
    pub fn start(ip: Ipv4Addr, port: u16, proxy: SocketAddr, sni: &str) -> Result<Self, String> {
        use std::process::{Command, Stdio};
        let dir = tempfile::tempdir().map_err(|err| err.to_string())?;
        let (server, _) = crate::kube::start_api_server(dir.path(), ip, port, sni)?;
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: proxy\n  cluster:\n    server: https://{proxy}\n    tls-server-name: {sni}\n    insecure-skip-tls-verify: true\ncontexts:\n- name: proxy\n  context:\n    cluster: proxy\n    user: bench\nusers:\n- name: bench\n  user:\n    token: bench\ncurrent-context: proxy\n"
            ),
        )
        .map_err(|err| err.to_string())?;
        let output = dir.path().join("watch.out");
        let file = std::fs::File::create(&output).map_err(|err| err.to_string())?;
        let kubectl = Command::new("kubectl")
            .env("KUBECONFIG", &kubeconfig)
            .args(["get", "--raw", "/api/v1/namespaces/default/pods?watch=true"])
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(Stdio::null())
            .spawn()
            .map_err(|err| format!("start kubectl: {err}"))?;
        Ok(KubectlWatch {
            server,
            kubectl,
            output,
            started: std::time::Instant::now(),
            _dir: dir,
        })
    }

    /// Watch events kubectl has printed so far.
    pub fn events(&self) -> usize {
        std::fs::read_to_string(&self.output).map_or(0, |text| {
            text.lines().filter(|l| l.contains("BOOKMARK")).count()
        })
    }

    /// kubectl's exit status once it has exited; `None` while it watches.
    pub fn exited(&mut self) -> Option<Option<i32>> {
        match self.kubectl.try_wait() {
            Ok(Some(status)) => Some(status.code()),
            Ok(None) | Err(_) => None,
        }
    }

    /// Ends the server's streams cleanly and waits (5 s at most) for kubectl to exit.
    pub fn end(mut self) -> WatchEnd {
        let survived = matches!(self.kubectl.try_wait(), Ok(None));
        let watched = self.started.elapsed();
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.server.id().to_string()])
            .status();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let status = loop {
            match self.kubectl.try_wait() {
                Ok(Some(status)) => break status.code(),
                Ok(None) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                _ => {
                    let _ = self.kubectl.kill();
                    let _ = self.kubectl.wait();
                    break None;
                }
            }
        };
        let _ = self.server.wait();
        let events = std::fs::read_to_string(&self.output).map_or(0, |text| {
            text.lines().filter(|l| l.contains("BOOKMARK")).count()
        });
        WatchEnd {
            survived,
            status,
            events,
            watched,
        }
    }
}

impl Drop for KubectlWatch {
    fn drop(&mut self) {
        let _ = self.kubectl.kill();
        let _ = self.server.kill();
    }
}
