//! A minimal HTTP/1.x answerer on the address service's unix socket, for one client: HAProxy's
//! stats listener, which forwards `/ready` and `/agent/metrics` to it.
//!
//! Hand-written rather than hyper's server: two GET routes, no bodies, no keep-alive, one
//! client on a local socket; what matters is that it is bounded, and here every bound is in
//! sight. A request head is read within [`HEAD_TIMEOUT`] and [`MAX_HEAD`] bytes, only `GET`
//! is answered, at most [`MAX_CONNECTIONS`] are served at once (more are closed at once), the
//! answer is written within [`WRITE_TIMEOUT`], and the connection is closed after it. Every
//! connection is a task of its own on the service's runtime: it only waits, so the resolving
//! loop never waits for it.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Semaphore;

use super::Answerer;
// Connections served at once: as many as on the control socket.
use crate::control::MAX_CONNECTIONS;

/// The longest request head read.
pub const MAX_HEAD: usize = 8 * 1024;
/// The time a client has to send its request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(2);
/// The time a client has to take the answer.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(2);

/// An answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
}

impl Response {
    pub fn text(status: u16, body: impl Into<String>) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.into(),
        }
    }

    /// The bytes on the wire: status line, headers, body; the connection closes after it.
    pub fn to_bytes(&self) -> Vec<u8> {
        let reason = match self.status {
            200 => "OK",
            400 => "Bad Request",
            404 => "Not Found",
            405 => "Method Not Allowed",
            431 => "Request Header Fields Too Large",
            503 => "Service Unavailable",
            _ => "Error",
        };
        let allow = if self.status == 405 {
            "Allow: GET\r\n"
        } else {
            ""
        };
        let mut bytes = format!(
            "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\n{allow}Connection: close\r\n\r\n",
            self.status,
            self.content_type,
            self.body.len()
        )
        .into_bytes();
        bytes.extend_from_slice(self.body.as_bytes());
        bytes
    }
}

/// What a request head asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `GET` of this path (the query string cut off).
    Get(String),
    /// Anything else: answered 405.
    OtherMethod(String),
}

/// Why a head was not a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadError {
    /// Not `METHOD target HTTP/1.x`.
    Malformed,
    /// Longer than [`MAX_HEAD`] without an end.
    TooLarge,
}

/// The end of the head in `bytes` (just after the empty line), if it is there.
pub fn head_end(bytes: &[u8]) -> Option<usize> {
    let crlf = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| i + 4);
    let lf = bytes.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    [crlf, lf].into_iter().flatten().min()
}

/// The request line of a complete head.
pub fn parse_head(head: &[u8]) -> Result<Request, HeadError> {
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = std::str::from_utf8(line).map_err(|_| HeadError::Malformed)?;
    let mut words = line.trim_end_matches('\r').split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return Err(HeadError::Malformed);
    };
    if !matches!(version, "HTTP/1.0" | "HTTP/1.1")
        || !target.starts_with('/')
        || method.is_empty()
        || !method.bytes().all(|b| b.is_ascii_uppercase())
    {
        return Err(HeadError::Malformed);
    }
    let path = target.split('?').next().unwrap_or(target);
    Ok(if method == "GET" {
        Request::Get(path.to_owned())
    } else {
        Request::OtherMethod(method.to_owned())
    })
}

/// Accepts connections on `listener` until the task is aborted.
pub async fn serve(listener: UnixListener, answerer: Answerer) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // Out of file descriptors or similar: do not spin on it.
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            drop(stream);
            continue;
        };
        let answerer = answerer.clone();
        tokio::spawn(async move {
            answer(stream, &answerer).await;
            drop(slot);
        });
    }
}

/// Reads one request head and answers it.
async fn answer(mut stream: UnixStream, answerer: &Answerer) {
    let response = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut stream)).await {
        Err(_) => return,
        Ok(Err(HeadError::TooLarge)) => Response::text(431, "request head too large\n"),
        Ok(Err(HeadError::Malformed)) => Response::text(400, "expected an HTTP/1.x request\n"),
        Ok(Ok(Request::OtherMethod(_))) => Response::text(405, "only GET is answered here\n"),
        Ok(Ok(Request::Get(path))) => answerer.get(&path).await,
    };
    let _ = tokio::time::timeout(WRITE_TIMEOUT, async {
        stream.write_all(&response.to_bytes()).await?;
        stream.shutdown().await
    })
    .await;
}

async fn read_head(stream: &mut UnixStream) -> Result<Request, HeadError> {
    let mut head = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = head_end(&head) {
            return parse_head(&head[..end]);
        }
        if head.len() >= MAX_HEAD {
            return Err(HeadError::TooLarge);
        }
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|_| HeadError::Malformed)?;
        if n == 0 {
            return Err(HeadError::Malformed);
        }
        head.extend_from_slice(&chunk[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_heads_are_read_as_http_1() {
        let get = |path: &str| Ok(Request::Get(path.to_owned()));
        for (head, want) in [
            ("GET /ready HTTP/1.1\r\nhost: x\r\n\r\n", get("/ready")),
            ("GET /agent/metrics?x=1 HTTP/1.0\n\n", get("/agent/metrics")),
            (
                "POST /ready HTTP/1.1\r\n\r\n",
                Ok(Request::OtherMethod("POST".to_owned())),
            ),
            ("GET /ready HTTP/2\r\n\r\n", Err(HeadError::Malformed)),
            ("GET ready HTTP/1.1\r\n\r\n", Err(HeadError::Malformed)),
            ("GET  /ready HTTP/1.1\r\n\r\n", Err(HeadError::Malformed)),
            ("get /ready HTTP/1.1\r\n\r\n", Err(HeadError::Malformed)),
            ("\r\n\r\n", Err(HeadError::Malformed)),
        ] {
            assert_eq!(parse_head(head.as_bytes()), want, "{head:?}");
        }
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r\n\r\nrest"), Some(24));
        assert_eq!(head_end(b"GET / HTTP/1.1\n\n"), Some(16));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r\n"), None);
    }

    #[test]
    fn an_answer_says_its_length_and_closes() {
        let bytes = Response::text(503, "not ready\n").to_bytes();
        let text = String::from_utf8(bytes).expect("text");
        assert!(
            text.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{text}"
        );
        assert!(text.contains("\r\nContent-Length: 10\r\n"), "{text}");
        assert!(
            text.contains("\r\nConnection: close\r\n\r\nnot ready\n"),
            "{text}"
        );
        let refused = String::from_utf8(Response::text(405, "").to_bytes()).expect("text");
        assert!(refused.contains("\r\nAllow: GET\r\n"), "{refused}");
    }
}
