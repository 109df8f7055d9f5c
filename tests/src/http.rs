//! A plain HTTP GET over loopback, for the servers the tests start (HAProxy's stats
//! listener, moto).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// An HTTP answer: its status and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    /// The header lines, lower-cased names, as sent.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    /// The first header of that (lower-case) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// `GET path` on `addr` with `headers` besides `Host` (HTTP/1.0, so the server closes when
/// done); the answer.
pub fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> std::io::Result<Answer> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes())?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw);
    let invalid =
        |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned());
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| invalid("no end of headers"))?;
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| invalid("no status line"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_lowercase(), value.trim().to_owned()))
        .collect();
    // HAProxy's exporter answers chunked even to HTTP/1.0.
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    let body = if chunked {
        dechunk(body).ok_or_else(|| invalid("a malformed chunked body"))?
    } else {
        body.to_owned()
    };
    Ok(Answer {
        status,
        headers,
        body,
    })
}

/// A chunked body's content; `None` when it is cut or malformed.
fn dechunk(mut rest: &str) -> Option<String> {
    let mut out = String::new();
    loop {
        let (size, after) = rest.split_once("\r\n")?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            return Some(out);
        }
        out.push_str(after.get(..size)?);
        rest = after.get(size..)?.strip_prefix("\r\n")?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunked_body_is_put_back_together() {
        assert_eq!(
            dechunk("3\r\nab\n\r\n2\r\ncd\r\n0\r\n\r\n").as_deref(),
            Some("ab\ncd")
        );
        assert_eq!(dechunk("3\r\nab"), None);
        assert_eq!(dechunk("zz\r\n"), None);
    }
}
