//! A stand-in for the `ResponseURL` CloudFormation gives a custom resource (a presigned S3
//! URL): an HTTP/1.1 server on 127.0.0.1 that records every request whole (method, path,
//! headers, body) and answers each with a fixed status, one request per connection.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::Mutex;
use std::time::Duration;

use crate::loopback::LoopbackServer;

/// One request as it arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    pub method: String,
    /// The request target: path and query.
    pub target: String,
    /// Header names lower-cased, in arrival order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Recorded {
    /// The value of header `name` (lower case), if it was sent.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|err| {
            panic!(
                "the response body is not JSON ({err}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }
}

/// A running stand-in; its accept loop stops when it is dropped.
#[derive(Debug)]
pub struct ResponseUrl {
    pub port: u16,
    server: LoopbackServer<Recorded>,
}

impl ResponseUrl {
    /// Answers every request 200, as S3 does a PUT to a valid presigned URL.
    pub fn start() -> ResponseUrl {
        ResponseUrl::answering(200)
    }

    /// Answers every request with `status` (403: an expired URL).
    pub fn answering(status: u16) -> ResponseUrl {
        let server = LoopbackServer::start(move |client, log| serve(client, status, log));
        ResponseUrl {
            port: server.port,
            server,
        }
    }

    /// A URL shaped like CloudFormation's (a path and a signature in the query).
    pub fn url(&self) -> String {
        format!(
            "http://127.0.0.1:{}/arn%3Aaws%3Acloudformation%3Aus-east-1%3A123456789012%3Astack/autoproxy/response?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=0123abcd",
            self.port
        )
    }

    /// The requests received so far, in order, and forgets them.
    pub fn take(&self) -> Vec<Recorded> {
        self.server.take()
    }
}

fn serve(client: TcpStream, status: u16, log: &Mutex<Vec<Recorded>>) {
    let _ = client.set_read_timeout(Some(Duration::from_secs(10)));
    let Ok(mut writer) = client.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(client);
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut words = line.split_whitespace();
    let (method, target) = (
        words.next().unwrap_or_default().to_owned(),
        words.next().unwrap_or_default().to_owned(),
    );
    let mut headers = Vec::new();
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).unwrap_or(0) == 0 {
            return;
        }
        let header = header.trim_end_matches(['\r', '\n']);
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
    }
    let length = headers
        .iter()
        .find(|(name, _)| name == "content-length")
        .and_then(|(_, value)| value.parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    log.lock().expect("request log").push(Recorded {
        method,
        target,
        headers,
        body,
    });
    let reason = if status == 200 { "OK" } else { "Refused" };
    let text = if status == 200 {
        ""
    } else {
        "<Error><Code>AccessDenied</Code></Error>"
    };
    let _ = write!(
        writer,
        "HTTP/1.1 {status} {reason}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    );
    let _ = writer.flush();
}
