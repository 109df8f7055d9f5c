//! The queries the server received, and the rates they came at.

use std::time::{Duration, Instant};

/// One query the server received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// When the kernel took it in (for UDP; for TCP, when its message was read).
    pub at: Instant,
    /// The question's name, lower-cased, without the trailing dot.
    pub name: String,
    pub qtype: u16,
    /// Whether it came over TCP.
    pub tcp: bool,
}

/// Queries per 1-s window from `from` (the first window is `[from, from + 1 s)`) until `to`;
/// queries outside `[from, to)` are not counted.
pub fn per_second(queries: &[Query], from: Instant, to: Instant) -> Vec<usize> {
    let windows = to.saturating_duration_since(from).as_secs_f64().ceil() as usize;
    let mut counts = vec![0; windows];
    for query in queries.iter().filter(|q| q.at >= from && q.at < to) {
        let index = (query.at - from).as_secs() as usize;
        if let Some(count) = counts.get_mut(index) {
            *count += 1;
        }
    }
    counts
}

/// The most queries received in any window of length `window` (sliding, not aligned to
/// anything). `queries` must be in arrival order, as [`DnsServer::queries`] gives them.
pub fn max_in_window(queries: &[Query], window: Duration) -> usize {
    let mut start = 0;
    let mut best = 0;
    for (end, query) in queries.iter().enumerate() {
        while query.at.duration_since(queries[start].at) >= window {
            start += 1;
        }
        best = best.max(end + 1 - start);
    }
    best
}

/// The most queries received in any 1-s window (sliding).
pub fn max_per_second(queries: &[Query]) -> usize {
    max_in_window(queries, Duration::from_secs(1))
}

/// Queries per second on average between the first and the last query (0 for fewer than two).
pub fn average_per_second(queries: &[Query]) -> f64 {
    match (queries.first(), queries.last()) {
        (Some(first), Some(last)) if queries.len() > 1 => {
            let span = last.at.duration_since(first.at).as_secs_f64();
            if span > 0.0 {
                (queries.len() - 1) as f64 / span
            } else {
                0.0
            }
        }
        _ => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dns::wire::A;

    #[test]
    fn rates_per_window() {
        let t0 = Instant::now();
        let at = |ms: u64| Query {
            at: t0 + Duration::from_millis(ms),
            name: "x".to_owned(),
            qtype: A,
            tcp: false,
        };
        let queries: Vec<Query> = [0, 100, 900, 1000, 1500, 1950, 3100]
            .into_iter()
            .map(at)
            .collect();
        assert_eq!(
            per_second(&queries, t0, t0 + Duration::from_millis(3500)),
            [3, 3, 0, 1]
        );
        // Every window of one second ending at a query, (t - 1 s, t], holds three at most.
        assert_eq!(max_per_second(&queries), 3);
        assert_eq!(max_in_window(&queries, Duration::from_millis(101)), 2);
        assert!((average_per_second(&queries) - 6.0 / 3.1).abs() < 1e-9);
        assert_eq!(average_per_second(&queries[..1]), 0.0);
    }
}
