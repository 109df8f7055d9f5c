//! An HTTP proxy in front of moto that fails chosen accounts' calls the way AWS does, and
//! counts every request by service: moto lets any role be assumed and never throttles.
//!
//! It reads each request whole (the SDK sends a `Content-Length` for every call here), names
//! its service from the SigV4 credential scope, and either answers with a canned AWS error or
//! forwards it to moto on a connection of its own (`Connection: close`) and hands the answer
//! back with its length. An account is recognised by its STS `AssumeRole` (the `RoleArn`
//! parameter), and its later calls by the access key moto issued in that answer.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};

use crate::loopback::LoopbackServer;

/// How a chosen account fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// STS refuses its role (none created, or its trust policy says no): 403 AccessDenied.
    AssumeDenied,
    /// The role is assumed, but Route53 answers 403 AccessDenied (its policy denies).
    Route53Denied,
    /// Route53 answers 400 Throttling to every call.
    Route53Throttled,
}

#[derive(Debug, Default)]
struct Shared {
    faults: BTreeMap<String, Fault>,
    /// Access key id → account, learnt from AssumeRole answers.
    keys: BTreeMap<String, String>,
    /// Requests seen, by service (`sts`, `route53`, `organizations`, `s3`).
    calls: BTreeMap<String, u64>,
}

/// A running proxy; its threads stop accepting when it is dropped.
#[derive(Debug)]
pub struct FaultProxy {
    pub port: u16,
    shared: Arc<Mutex<Shared>>,
    _server: LoopbackServer<()>,
}

impl FaultProxy {
    pub fn start(upstream: SocketAddr) -> FaultProxy {
        let shared = Arc::new(Mutex::new(Shared::default()));
        let state = shared.clone();
        let server = LoopbackServer::start(move |client, _log: &Mutex<Vec<()>>| {
            serve(client, upstream, &state);
        });
        FaultProxy {
            port: server.port,
            shared,
            _server: server,
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// From now on, `account` fails this way (`None`: it works again).
    pub fn set(&self, account: &str, fault: Option<Fault>) {
        let mut shared = lock(&self.shared);
        match fault {
            Some(fault) => shared.faults.insert(account.to_owned(), fault),
            None => shared.faults.remove(account),
        };
    }

    /// Requests to `service` so far.
    pub fn calls(&self, service: &str) -> u64 {
        lock(&self.shared).calls.get(service).copied().unwrap_or(0)
    }
}

fn lock(shared: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    shared
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One request as read: its head (request line and headers, without the blank line) and body.
struct Request {
    head: String,
    body: Vec<u8>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim()
                .eq_ignore_ascii_case(name)
                .then_some(value.trim())
        })
    }

    /// The SigV4 scope's access key and service.
    fn credential(&self) -> Option<(String, String)> {
        let auth = self.header("authorization")?;
        let scope = auth.split("Credential=").nth(1)?.split(',').next()?;
        let mut parts = scope.split('/');
        let key = parts.next()?.to_owned();
        let service = parts.nth(2)?.to_owned();
        Some((key, service))
    }
}

fn serve(client: TcpStream, upstream: SocketAddr, shared: &Mutex<Shared>) {
    let Ok(mut writer) = client.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(client);
    while let Some(request) = read_request(&mut reader) {
        let answer = answer(&request, upstream, shared);
        if writer.write_all(&answer).is_err() {
            return;
        }
    }
}

fn read_request(reader: &mut impl BufRead) -> Option<Request> {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if line == "\r\n" || line == "\n" {
            break;
        }
        head.push_str(&line);
    }
    let mut request = Request {
        head,
        body: Vec::new(),
    };
    let length: usize = request
        .header("content-length")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    request.body = vec![0; length];
    reader.read_exact(&mut request.body).ok()?;
    Some(request)
}

/// The canned failure for this request, or moto's answer.
fn answer(request: &Request, upstream: SocketAddr, shared: &Mutex<Shared>) -> Vec<u8> {
    let (key, service) = request.credential().unwrap_or_default();
    let assumed = (service == "sts")
        .then(|| role_account(&request.body))
        .flatten();
    let fault = {
        let mut shared = lock(shared);
        *shared.calls.entry(service.clone()).or_default() += 1;
        let account = assumed.clone().or_else(|| shared.keys.get(&key).cloned());
        account.and_then(|account| shared.faults.get(&account).copied())
    };
    match (fault, service.as_str(), &assumed) {
        (Some(Fault::AssumeDenied), "sts", Some(account)) => {
            return error(
                403,
                "sts.amazonaws.com/doc/2011-06-15",
                "AccessDenied",
                account,
            );
        }
        (Some(Fault::Route53Denied), "route53", _) => {
            return error(
                403,
                "route53.amazonaws.com/doc/2013-04-01",
                "AccessDenied",
                &key,
            );
        }
        (Some(Fault::Route53Throttled), "route53", _) => {
            return error(
                400,
                "route53.amazonaws.com/doc/2013-04-01",
                "Throttling",
                &key,
            );
        }
        _ => {}
    }
    let response = forward(request, upstream).unwrap_or_else(|| error(502, "", "Proxy", ""));
    if let Some(account) = assumed {
        let text = String::from_utf8_lossy(&response);
        if let Some(issued) = between(&text, "<AccessKeyId>", "</AccessKeyId>") {
            lock(shared).keys.insert(issued.to_owned(), account);
        }
    }
    response
}

/// The account of an `AssumeRole`'s `RoleArn` (form-encoded body).
fn role_account(body: &[u8]) -> Option<String> {
    let body = String::from_utf8_lossy(body);
    let arn = body
        .split('&')
        .find_map(|pair| pair.strip_prefix("RoleArn="))?
        .replace("%3A", ":")
        .replace("%3a", ":");
    arn.split(':').nth(4).map(str::to_owned)
}

fn between<'a>(text: &'a str, open: &str, close: &str) -> Option<&'a str> {
    let start = text.find(open)? + open.len();
    let end = text[start..].find(close)? + start;
    Some(&text[start..end])
}

fn error(status: u16, namespace: &str, code: &str, about: &str) -> Vec<u8> {
    let body = format!(
        "<?xml version=\"1.0\"?>\n<ErrorResponse xmlns=\"https://{namespace}/\"><Error>\
         <Type>Sender</Type><Code>{code}</Code><Message>{code} (injected for {about})</Message>\
         </Error><RequestId>fault-proxy</RequestId></ErrorResponse>"
    );
    let reason = if status == 403 {
        "Forbidden"
    } else {
        "Bad Request"
    };
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/xml\r\nContent-Length: {}\r\n\
         x-amzn-RequestId: fault-proxy\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

/// Sends the request to moto on a fresh connection and returns its answer with an exact
/// length, ready for the client's kept-alive connection.
fn forward(request: &Request, upstream: SocketAddr) -> Option<Vec<u8>> {
    let mut server = TcpStream::connect(upstream).ok()?;
    let mut head: Vec<&str> = request
        .head
        .lines()
        .filter(|line| !line.to_ascii_lowercase().starts_with("connection:"))
        .collect();
    head.push("Connection: close");
    let mut out = head.join("\r\n").into_bytes();
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(&request.body);
    server.write_all(&out).ok()?;
    let mut response = Vec::new();
    server.read_to_end(&mut response).ok()?;
    if request.head.starts_with("HEAD ") {
        return Some(response);
    }
    let split = response.windows(4).position(|w| w == b"\r\n\r\n")?;
    let (head, body) = (&response[..split], &response[split + 4..]);
    let head = String::from_utf8_lossy(head);
    let mut lines: Vec<&str> = head
        .split("\r\n")
        .filter(|line| {
            let lower = line.to_ascii_lowercase();
            !["content-length:", "connection:", "transfer-encoding:"]
                .iter()
                .any(|name| lower.starts_with(name))
        })
        .collect();
    let length = format!("Content-Length: {}", body.len());
    lines.push(&length);
    let mut answer = lines.join("\r\n").into_bytes();
    answer.extend_from_slice(b"\r\n\r\n");
    answer.extend_from_slice(body);
    Some(answer)
}
