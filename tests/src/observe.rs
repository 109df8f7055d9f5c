//! The data plane as a test reads it: HTTP answers of the address service's socket (the stats
//! listener that forwards to it is read with [`crate::prometheus::get`]), and the CloudWatch
//! metrics the service published to
//! moto (through a stand-in that speaks the SDK's protocol to it).

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime};

use crate::moto::{Moto, free_port, tools_bin};

/// An HTTP answer: status and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub body: String,
}

/// `GET path` on the unix socket at `socket`.
pub fn get_unix(socket: &Path, path: &str) -> std::io::Result<Answer> {
    let mut stream = UnixStream::connect(socket)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    exchange(&mut stream, path)
}

fn exchange(stream: &mut (impl Read + Write), path: &str) -> std::io::Result<Answer> {
    stream.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: autoproxy.test\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let bad = || std::io::Error::other(format!("not an HTTP answer: {text:?}"));
    let (head, body) = text.split_once("\r\n\r\n").ok_or_else(bad)?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(bad)?;
    Ok(Answer {
        status,
        body: body.to_owned(),
    })
}

/// The value of the unlabelled sample `name` in a Prometheus text.
pub fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let value = line.strip_prefix(name)?.strip_prefix(' ')?;
        value.trim().parse().ok()
    })
}

/// What moto holds of one metric of one instance: how many data points, their sum and
/// their maximum.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Points {
    pub count: f64,
    pub sum: f64,
    pub max: f64,
}

/// The stand-in between aws-sdk-cloudwatch and moto (`tests/data/cloudwatch-cbor.py`): the SDK
/// speaks only Smithy RPC v2 CBOR, which moto does not serve. Killed when dropped.
#[derive(Debug)]
pub struct CborShim {
    child: Child,
    pub port: u16,
}

impl CborShim {
    /// In front of the moto at `moto_endpoint`; `keys` (access key id, secret) are the
    /// principals it may call moto as (anyone else as `testing`).
    pub fn start(moto_endpoint: &str, keys: &[(&str, &str)]) -> CborShim {
        let port = free_port();
        let keys: serde_json::Map<String, serde_json::Value> = keys
            .iter()
            .map(|(id, secret)| ((*id).to_owned(), serde_json::Value::from(*secret)))
            .collect();
        let python = tools_bin().parent().map_or_else(
            || "python3".into(),
            |cache| cache.join("venv-moto/bin/python"),
        );
        let mut child = Command::new(python)
            .arg(crate::root().join("tests/data/cloudwatch-cbor.py"))
            .args([
                moto_endpoint,
                &port.to_string(),
                &serde_json::Value::Object(keys).to_string(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the CloudWatch CBOR stand-in (run .ci/tools.sh for moto's venv)");
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let listening = crate::wait_listening(addr, Duration::from_secs(20), || {
            matches!(child.try_wait(), Ok(Some(_)))
        });
        assert_eq!(
            listening,
            crate::Listening::Yes,
            "the CBOR stand-in did not listen"
        );
        CborShim { child, port }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for CborShim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// CloudWatch for the address service: moto, and the CBOR stand-in in front of it.
#[derive(Debug)]
pub struct CloudWatch {
    pub moto: Moto,
    pub shim: CborShim,
}

impl CloudWatch {
    pub fn start() -> CloudWatch {
        let moto = Moto::start();
        let shim = CborShim::start(&moto.endpoint(), &[]);
        CloudWatch { moto, shim }
    }

    /// Environment for the address service to publish here.
    pub fn env(&self) -> Vec<(String, String)> {
        let mut env = self.moto.env();
        for (name, value) in &mut env {
            if name == "AWS_ENDPOINT_URL" {
                *value = self.shim.endpoint();
            }
        }
        env
    }

    /// The data points of `metric` in namespace `autoproxy` for `instance` over the last
    /// hour, read from moto with the AWS CLI.
    pub fn points(&self, metric: &str, instance: &str) -> Result<Points, String> {
        let now = SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let out = Command::new(crate::tool("aws"))
            .envs(self.moto.env())
            .args(["--output", "json", "cloudwatch", "get-metric-statistics"])
            .args(["--namespace", "autoproxy", "--metric-name", metric])
            .args(["--dimensions", &format!("Name=InstanceId,Value={instance}")])
            .args(["--start-time", &(now - 3600).to_string()])
            .args(["--end-time", &(now + 60).to_string()])
            .args([
                "--period",
                "3660",
                "--statistics",
                "SampleCount",
                "Sum",
                "Maximum",
            ])
            .output()
            .map_err(|err| format!("cannot run the AWS CLI: {err}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        let answer: serde_json::Value =
            serde_json::from_slice(&out.stdout).map_err(|err| err.to_string())?;
        let mut points = Points {
            count: 0.0,
            sum: 0.0,
            max: f64::NEG_INFINITY,
        };
        for point in answer["Datapoints"].as_array().into_iter().flatten() {
            points.count += point["SampleCount"].as_f64().unwrap_or(0.0);
            points.sum += point["Sum"].as_f64().unwrap_or(0.0);
            points.max = points
                .max
                .max(point["Maximum"].as_f64().unwrap_or(f64::NEG_INFINITY));
        }
        Ok(points)
    }
}
