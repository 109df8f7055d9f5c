//! A Kubernetes API server stand-in whose certificate carries exactly one name, and `kubectl`
//! against it with `tls-server-name`, verifying that certificate: the EKS shape, where the
//! certificate names only the endpoint and no other name can be added.

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// `tests/data/watch-apiserver.py` on `ip:port` with a fresh self-signed certificate whose
/// only name (subjectAltName) is `name`. Stopped on drop.
#[derive(Debug)]
pub struct ApiServer {
    server: Child,
    /// The certificate, which kubeconfigs trust as their certificate authority.
    pub certificate: PathBuf,
    pub addr: SocketAddr,
    dir: tempfile::TempDir,
}

impl ApiServer {
    pub fn start(ip: Ipv4Addr, port: u16, name: &str) -> Result<ApiServer, String> {
        let dir = tempfile::tempdir().map_err(|err| err.to_string())?;
        let (server, cert) = start_api_server(dir.path(), ip, port, name)?;
        Ok(ApiServer {
            server,
            certificate: cert,
            addr: SocketAddr::from((ip, port)),
            dir,
        })
    }

    /// `kubectl get --raw <path>` against `server` sending `tls_server_name`, trusting only
    /// this server's certificate (no `insecure-skip-tls-verify`): its output, or why it failed.
    pub fn kubectl_raw(
        &self,
        server: &str,
        tls_server_name: &str,
        path: &str,
    ) -> Result<String, String> {
        let kubeconfig = self.dir.path().join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: eks\n  cluster:\n    server: {server}\n    tls-server-name: {tls_server_name}\n    certificate-authority: {}\ncontexts:\n- name: eks\n  context:\n    cluster: eks\n    user: e2e\nusers:\n- name: e2e\n  user:\n    token: e2e\ncurrent-context: eks\n",
                self.certificate.display()
            ),
        )
        .map_err(|err| err.to_string())?;
        let out = Command::new("kubectl")
            .env("KUBECONFIG", &kubeconfig)
            .args(["get", "--raw", path, "--request-timeout=10s"])
            .stdin(Stdio::null())
            .output()
            .map_err(|err| format!("kubectl: {err}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

/// `tests/data/watch-apiserver.py` on `ip:port`, serving a fresh self-signed certificate (in
/// `dir`) whose only name is `name`: the process, once it said it listens, and the certificate.
pub fn start_api_server(
    dir: &std::path::Path,
    ip: Ipv4Addr,
    port: u16,
    name: &str,
) -> Result<(Child, PathBuf), String> {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let made = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .arg("-subj")
        .arg(format!("/CN={name}"))
        .arg("-addext")
        .arg(format!("subjectAltName=DNS:{name}"))
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|err| format!("openssl: {err}"))?;
    if !made.success() {
        return Err(format!("openssl req {made}"));
    }
    let mut server = Command::new("python3")
        .arg(crate::root().join("tests/data/watch-apiserver.py"))
        .arg(ip.to_string())
        .arg(port.to_string())
        .arg(&cert)
        .arg(&key)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|err| format!("start the API server: {err}"))?;
    let mut ready = String::new();
    if let Some(out) = server.stdout.take() {
        let _ = BufReader::new(out).read_line(&mut ready);
    }
    if ready.trim() != "listening" {
        let _ = server.kill();
        let _ = server.wait();
        return Err(format!("the API server did not start on {ip}:{port}"));
    }
    Ok((server, cert))
}
