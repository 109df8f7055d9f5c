//! A per-account pacing limiter: Route53 allows about 5 requests per second per account,
//! shared with every other tool there, so calls are spaced evenly rather than bursted.
//!
//! Spacing the *starts* is not enough: a call goes on the wire some time after its slot (the
//! first call of an assumed-role account waits for STS; a new connection waits for TCP), so
//! a late call and an on-time one could land less than `1 / rate` apart, and six in one
//! second (measured: tests/tests/it/ratelimit.rs saw a 185 ms gap). Each call therefore
//! holds a [`Permit`] until its answer is in, and a new call starts only when fewer than
//! `rate` calls are in flight or have finished within the last second: its request, sent
//! at or after its start, can then share no one-second window with more than `rate - 1`
//! others, whatever the delays.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::sync::{Mutex, Notify};
use tokio::time::Instant;

const WINDOW: Duration = Duration::from_secs(1);

/// Spaces calls at least `1 / rate` seconds apart and keeps at most `rate` calls in any
/// window of one second, counted from each call's start to its end.
#[derive(Debug)]
pub struct RateLimiter {
    rate: usize,
    interval: Duration,
    /// One caller at a time picks its slot (first come, first served).
    turn: Mutex<()>,
    state: std::sync::Mutex<State>,
    finished: Notify,
}

#[derive(Debug, Default)]
struct State {
    next: Option<Instant>,
    in_flight: usize,
    /// When recent calls finished; older than [`WINDOW`] they no longer count.
    ended: VecDeque<Instant>,
}

/// A call in flight; dropping it (when the answer is in) ends the call.
#[derive(Debug)]
#[must_use = "hold the permit until the call has its answer"]
pub struct Permit<'a> {
    limiter: &'a RateLimiter,
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        let mut state = self.limiter.state();
        state.in_flight = state.in_flight.saturating_sub(1);
        state.ended.push_back(Instant::now());
        drop(state);
        self.limiter.finished.notify_one();
    }
}

impl RateLimiter {
    pub fn per_second(rate: f64) -> Self {
        RateLimiter {
            // A fractional rate (0.5/s) still allows one call per window.
            rate: (rate.floor() as usize).max(1),
            interval: Duration::from_secs_f64(1.0 / rate),
            turn: Mutex::new(()),
            state: std::sync::Mutex::new(State::default()),
            finished: Notify::new(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Waits for this caller's slot; hold the permit until the call has its answer.
    pub async fn acquire(&self) -> Permit<'_> {
        let _turn = self.turn.lock().await;
        loop {
            let finished = self.finished.notified();
            let wait_until = {
                let mut state = self.state();
                let now = Instant::now();
                while state.ended.front().is_some_and(|&at| at + WINDOW <= now) {
                    state.ended.pop_front();
                }
                let spaced = state.next.filter(|&at| at > now);
                let busy = state.in_flight + state.ended.len() >= self.rate;
                if spaced.is_none() && !busy {
                    state.in_flight += 1;
                    state.next = Some(now + self.interval);
                    return Permit { limiter: self };
                }
                // The earliest moment either condition can change; a call in flight may
                // also end before it.
                let freed = state.ended.front().map(|&at| at + WINDOW);
                match (spaced, busy) {
                    (Some(at), false) => Some(at),
                    (spaced, _) => freed.max(spaced),
                }
            };
            match wait_until {
                Some(at) => {
                    let _ = tokio::time::timeout_at(at, finished).await;
                }
                None => finished.await,
            }
        }
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
            drop(limiter.acquire().await);
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
                drop(limiter.acquire().await);
                start.elapsed()
            });
        }
        let mut at = tasks.join_all().await;
        at.sort();
        for pair in at.windows(2) {
            assert!(pair[1] - pair[0] >= Duration::from_millis(200), "{at:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_that_ends_late_keeps_its_window_full() {
        let limiter = RateLimiter::per_second(5.0);
        let start = Instant::now();
        // The first call takes 300 ms to answer: its request may have left at any moment up
        // to then, so it counts until 1.3 s. Plain spacing would start the sixth call at
        // 1.0 s; it waits until the 200 ms call leaves the window.
        let slow = limiter.acquire().await;
        let mut at = Vec::new();
        for _ in 0..3 {
            drop(limiter.acquire().await);
            at.push(start.elapsed());
        }
        tokio::time::sleep_until(start + Duration::from_millis(300)).await;
        drop(slow);
        for _ in 0..2 {
            drop(limiter.acquire().await);
            at.push(start.elapsed());
        }
        let ms = |ms| Duration::from_millis(ms);
        assert_eq!(at, [ms(200), ms(400), ms(600), ms(800), ms(1200)]);
    }
}
