//! The service's log: one line per event on stderr (the journal, under systemd), each with
//! the same prefix.

/// The prefix of every log line.
const PREFIX: &str = "autoproxy-resolver: ";

/// Writes one line; a log that cannot be written is not worth stopping for.
pub fn log(message: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{PREFIX}{message}");
}
