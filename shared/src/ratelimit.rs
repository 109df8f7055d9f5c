//! A per-account pacing limiter: Route53 allows about 5 requests per second per account,
//! shared with every other tool there, so calls are spaced evenly rather than bursted.

use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;

/// Spaces calls at least `1 / rate` seconds apart; any window of one second then holds at
/// most `rate` calls.
#[derive(Debug)]
pub struct RateLimiter {
    interval: Duration,
    next: Mutex<Option<Instant>>,
}

impl RateLimiter {
    pub fn per_second(rate: f64) -> Self {
        RateLimiter {
            interval: Duration::from_secs_f64(1.0 / rate),
            next: Mutex::new(None),
        }
    }

    /// Waits for this caller's slot.
    pub async fn acquire(&self) {
        let slot = {
            let mut next = self.next.lock().await;
            let now = Instant::now();
            let slot = match *next {
                Some(at) if at > now => at,
                _ => now,
            };
            *next = Some(slot + self.interval);
            slot
        };
        tokio::time::sleep_until(slot).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn calls_are_spaced_by_the_interval() {
        let limiter = RateLimiter::per_second(5.0);
        let start = Instant::now();
        let mut at = Vec::new();
        for _ in 0..11 {
            limiter.acquire().await;
            at.push(start.elapsed());
        }
        for pair in at.windows(2) {
            assert!(pair[1] - pair[0] >= Duration::from_millis(200), "{at:?}");
        }
        // 11 calls at 5/s: the first at once, the last two seconds later.
        assert_eq!(at[10], Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_callers_share_one_pace() {
        let limiter = std::sync::Arc::new(RateLimiter::per_second(5.0));
        let start = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..10 {
            let limiter = limiter.clone();
            tasks.spawn(async move {
                limiter.acquire().await;
                start.elapsed()
            });
        }
        let mut at = tasks.join_all().await;
        at.sort();
        for pair in at.windows(2) {
            assert!(pair[1] - pair[0] >= Duration::from_millis(200), "{at:?}");
        }
    }
}
