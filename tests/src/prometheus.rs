//! Reading what the stats listener serves: a plain HTTP/1.0 GET over loopback, the Prometheus
//! text format's samples, and `promtool check metrics` on it.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
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

/// `GET path` on `addr` (HTTP/1.0, so the server closes when done); the answer.
pub fn get(addr: SocketAddr, path: &str) -> std::io::Result<Answer> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())?;
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

/// Every sample of a text exposition, keyed by `name{labels}` as written (`name` alone
/// without labels). Comments and blank lines are skipped; a line without a numeric value
/// is an error naming it.
pub fn samples(text: &str) -> Result<BTreeMap<String, f64>, String> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        // The value follows the series; an optional timestamp may follow the value.
        let series_end = line.find('}').map_or_else(
            || line.find(char::is_whitespace).unwrap_or(line.len()),
            |brace| brace + 1,
        );
        let (series, rest) = line.split_at(series_end);
        let value = rest
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
            .ok_or_else(|| format!("no value in {line:?}"))?;
        out.insert(series.to_owned(), value);
    }
    Ok(out)
}

/// What `promtool check metrics` found in an exposition that parsed: its lint lines.
/// A text promtool cannot parse, or a promtool that cannot be run, is an error: a missing
/// checker fails the test (`.ci/tools.sh` installs it), it never skips it.
pub fn promtool_lint(text: &str) -> Result<Vec<String>, String> {
    let promtool = crate::tool("promtool");
    let mut child = Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|err| {
            format!(
                "cannot run {} ({err}): .ci/tools.sh installs it",
                promtool.display()
            )
        })?;
    let mut stdin = child.stdin.take().ok_or("no stdin for promtool")?;
    let input = text.to_owned();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let output = child
        .wait_with_output()
        .map_err(|err| format!("promtool: {err}"))?;
    writer
        .join()
        .map_err(|_| "the writer thread panicked".to_owned())?
        .map_err(|err| format!("writing to promtool: {err}"))?;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    // 0: clean; 3: parsed, with lint findings; anything else: not a valid exposition.
    match output.status.code() {
        Some(0 | 3) => Ok(said
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect()),
        code => Err(format!("promtool check metrics exited {code:?}: {said}")),
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

    #[test]
    fn samples_are_keyed_by_series_with_labels() {
        let text = "# HELP a x\n# TYPE a counter\na_total 3\n\
                    b{proxy=\"x y\",server=\"s\"} 1.5 1700000000\nc NaN\n";
        let s = samples(text).unwrap();
        assert_eq!(s["a_total"], 3.0);
        assert_eq!(s["b{proxy=\"x y\",server=\"s\"}"], 1.5);
        assert!(s["c"].is_nan());
        assert!(samples("d{x=\"1\"}\n").unwrap_err().contains("no value"));
    }
}
