//! Reading what the stats listener serves: a plain HTTP GET over loopback ([`get`]), the
//! Prometheus text format's samples, and `promtool check metrics` on it.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::process::{Command, Stdio};

pub use crate::http::Answer;

/// `GET path` on `addr`; the answer.
pub fn get(addr: SocketAddr, path: &str) -> std::io::Result<Answer> {
    crate::http::get(addr, path, &[])
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
