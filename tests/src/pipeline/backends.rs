//! The TLS backends (`openssl s_server`) and the client that probes routes through HAProxy.

use super::*;

/// One `openssl s_server` per backend, each on its own loopback address and all on one
/// port, each with a self-signed certificate whose CN is the backend's name: the client
/// tells which backend answered from the certificate it is shown.
#[derive(Debug)]
pub struct TlsBackends {
    pub port: u16,
    processes: Vec<Spawned>,
}

impl TlsBackends {
    /// `backends`: (name = CN, address).
    pub fn start(
        dir: &Path,
        backends: &[(String, Ipv4Addr)],
    ) -> Result<TlsBackends, PipelineError> {
        let certs = dir.join("certs");
        std::fs::create_dir_all(&certs).map_err(|e| step_error("create the certs dir", e))?;
        for (name, _) in backends {
            let mut command = Command::new("openssl");
            command.args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
            ]);
            command.args(["-nodes", "-days", "2", "-subj", &format!("/CN={name}")]);
            command
                .arg("-keyout")
                .arg(certs.join(format!("{name}.key")));
            command.arg("-out").arg(certs.join(format!("{name}.crt")));
            run_bounded(command, "openssl req", Duration::from_secs(20))?;
        }
        let ips: Vec<Ipv4Addr> = backends.iter().map(|(_, ip)| *ip).collect();
        let port = shared_port(&ips)?;
        let mut processes = Vec::new();
        for (name, ip) in backends {
            let mut command = Command::new("openssl");
            command.args(["s_server", "-accept", &format!("{ip}:{port}"), "-www"]);
            command.arg("-cert").arg(certs.join(format!("{name}.crt")));
            command.arg("-key").arg(certs.join(format!("{name}.key")));
            let log = dir.join(format!("backend-{name}.log"));
            processes.push(Spawned::start(
                command,
                &format!("openssl s_server {name}"),
                &log,
            )?);
        }
        for (name, ip) in backends {
            wait_listening(
                SocketAddr::from((*ip, port)),
                &format!("backend {name}"),
                Duration::from_secs(10),
            )?;
        }
        Ok(TlsBackends { port, processes })
    }

    /// How many are running.
    pub fn running(&mut self) -> usize {
        self.processes
            .iter_mut()
            .map(Spawned::alive)
            .filter(|alive| *alive)
            .count()
    }
}

pub(super) fn shared_port(ips: &[Ipv4Addr]) -> Result<u16, PipelineError> {
    for _ in 0..50 {
        let port = crate::moto::free_port();
        let all_free = ips.iter().all(|ip| TcpListener::bind((*ip, port)).is_ok());
        if all_free {
            return Ok(port);
        }
    }
    Err(step_error(
        "find a port",
        "no port free on every backend address",
    ))
}

/// What a TLS client saw: where the name resolved and which backend's certificate it got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    pub sni: String,
    /// The address the SNI name resolved to through the resolver, if it did.
    pub resolved: Option<Ipv4Addr>,
    /// The CN of the certificate presented; `None` when HAProxy closed the connection.
    pub backend: Option<String>,
}

impl std::fmt::Display for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let resolved = self
            .resolved
            .map_or("does not resolve".to_owned(), |ip| format!("→ {ip}"));
        match &self.backend {
            Some(cn) => write!(f, "{} ({resolved}) reached backend {cn}", self.sni),
            None => write!(
                f,
                "{} ({resolved}): no route, HAProxy closed the connection",
                self.sni
            ),
        }
    }
}

/// Connects with `openssl s_client` and returns the CN of the certificate presented.
pub fn tls_peer(addr: SocketAddr, sni: &str) -> Option<String> {
    let mut command = Command::new("openssl");
    command.args([
        "s_client",
        "-connect",
        &addr.to_string(),
        "-servername",
        sni,
    ]);
    let output = match run_bounded(command, "openssl s_client", Duration::from_secs(10)) {
        Ok(out) => out,
        Err(PipelineError::Step { detail, .. }) => detail,
        Err(_) => return None,
    };
    output.lines().find_map(|line| {
        let subject = line.strip_prefix("subject=")?;
        subject
            .split(',')
            .find_map(|part| {
                part.trim()
                    .strip_prefix("CN")?
                    .trim_start()
                    .strip_prefix('=')
            })
            .map(|cn| cn.trim().to_owned())
    })
}
