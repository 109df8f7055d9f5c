//! Reloads under load: two clients connect to the four end routes, one connection after
//! another, while the master reloads.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use autoproxy_tests::dataplane::{self, Ends, Proxy, Target, Until};

/// What the clients saw while the master reloaded.
pub(super) struct UnderLoad {
    /// Reloads signalled, and how many of them completed within [`RELOAD_TIMEOUT`].
    pub(super) sent: usize,
    pub(super) completed: Vec<Duration>,
    pub(super) attempts: u64,
    pub(super) failures: u64,
}

/// How long one reload under load may take before the next one is signalled anyway.
pub(super) const RELOAD_TIMEOUT: Duration = Duration::from_secs(15);
/// No new reload is signalled after this long (a per-route reload can take seconds).
const RELOADS_CAP: Duration = Duration::from_secs(40);

/// Up to `reloads` reloads about 0.5 s apart (at most until [`RELOADS_CAP`]) while two
/// clients connect to the four end routes, one connection after another.
pub(super) fn reloads_under_load(proxy: &Proxy, ends: &Ends, reloads: usize) -> UnderLoad {
    let stop = Arc::new(AtomicBool::new(false));
    let until = Until {
        connections: u64::MAX,
        min_time: Duration::ZERO,
        max_time: Duration::from_secs(300),
        stop: Arc::clone(&stop),
    };
    let targets: Vec<Target> = ends.all().into_iter().cloned().collect();
    let addr = proxy.https;
    let clients = std::thread::spawn(move || dataplane::client_loop(addr, &targets, 2, &until));
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    let (mut sent, mut completed) = (0, Vec::new());
    while sent < reloads && started.elapsed() < RELOADS_CAP {
        let at = Instant::now();
        sent += 1;
        match proxy.reload(RELOAD_TIMEOUT) {
            Some(took) => completed.push(took),
            None => println!(
                "reload {sent} did not complete in {RELOAD_TIMEOUT:?} ({} HAProxy processes)",
                dataplane::children(proxy.master_pid()).len() + 1
            ),
        }
        let next = at + Duration::from_millis(500);
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::SeqCst);
    let tally = clients.join().expect("client loop");
    let times: Vec<String> = completed
        .iter()
        .map(|t| format!("{:.2}", t.as_secs_f64()))
        .collect();
    println!("reload times (s): {}", times.join(" "));
    println!(
        "{} of {sent} reloads completed under load: {} connections, {} failed {:?}",
        completed.len(),
        tally.attempts,
        tally.failures,
        tally.examples
    );
    UnderLoad {
        sent,
        completed,
        attempts: tally.attempts,
        failures: tally.failures,
    }
}
