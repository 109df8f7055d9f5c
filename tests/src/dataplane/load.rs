//! Client loops of TLS ClientHellos, CPU per connection, and the DNS traffic they cause.

use super::*;

/// What a client loop saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    pub attempts: u64,
    pub failures: u64,
    /// The first few failures, for the log.
    pub examples: Vec<String>,
}

/// When a client loop ends: after `connections` (and at least `min_time`), or at
/// `max_time`, or when `stop` is set.
#[derive(Debug, Clone)]
pub struct Until {
    pub connections: u64,
    pub min_time: Duration,
    pub max_time: Duration,
    pub stop: Arc<AtomicBool>,
}

impl Until {
    /// One CPU-per-connection sample: 1,000 connections, in 0.4 s at least and 1 s at most.
    pub fn cpu_sample() -> Until {
        Until {
            connections: 1_000,
            min_time: Duration::from_millis(400),
            max_time: Duration::from_secs(1),
            stop: Arc::new(AtomicBool::new(false)),
        }
    }
}

/// `threads` clients, each opening one connection after another with a ClientHello for
/// `targets` in turn and reading the backend's banner until the peer closes.
pub fn client_loop(addr: SocketAddr, targets: &[Target], threads: usize, until: &Until) -> Tally {
    let started = Instant::now();
    let attempts = AtomicU64::new(0);
    let failures = AtomicU64::new(0);
    let examples = std::sync::Mutex::new(Vec::new());
    let done = || {
        let elapsed = started.elapsed();
        until.stop.load(Ordering::SeqCst)
            || elapsed >= until.max_time
            || (attempts.load(Ordering::SeqCst) >= until.connections && elapsed >= until.min_time)
    };
    std::thread::scope(|scope| {
        for thread in 0..threads {
            let (attempts, failures, examples, done) = (&attempts, &failures, &examples, &done);
            scope.spawn(move || {
                let mut next = thread;
                while !done() {
                    let target = &targets[next % targets.len()];
                    next += 1;
                    attempts.fetch_add(1, Ordering::SeqCst);
                    let failure = match probe(addr, &target.sni) {
                        Ok(banner) if banner == target.banner => None,
                        Ok(banner) => Some(format!("{}: read {banner:?}", target.sni)),
                        Err(err) => Some(format!("{}: {err}", target.sni)),
                    };
                    if let Some(failure) = failure {
                        failures.fetch_add(1, Ordering::SeqCst);
                        let mut examples = examples.lock().expect("examples");
                        if examples.len() < 5 {
                            examples.push(failure);
                        }
                    }
                }
            });
        }
    });
    Tally {
        attempts: attempts.into_inner(),
        failures: failures.into_inner(),
        examples: examples.into_inner().expect("examples"),
    }
}

/// The worker CPU that connections to one route cost.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuPerConnection {
    pub connections: u64,
    /// Worker CPU per connection, minus what the idle worker burns in the same time.
    pub micros: f64,
    /// Without subtracting the idle worker's share.
    pub gross_micros: f64,
}

/// Connections made to one route, and the worker CPU and wall time they took.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuSample {
    pub connections: u64,
    pub ticks: u64,
    pub elapsed: Duration,
}

impl CpuSample {
    pub fn add(&mut self, other: CpuSample) {
        self.connections += other.connections;
        self.ticks += other.ticks;
        self.elapsed += other.elapsed;
    }

    /// Per connection, with `idle_ticks_per_second` (the worker's CPU without traffic)
    /// taken off.
    pub fn per_connection(
        &self,
        idle_ticks_per_second: f64,
        ticks_per_second: u64,
    ) -> CpuPerConnection {
        let per = |ticks: f64| {
            ticks.max(0.0) * 1e6 / ticks_per_second as f64 / self.connections.max(1) as f64
        };
        let ticks = self.ticks as f64;
        CpuPerConnection {
            connections: self.connections,
            micros: per(ticks - idle_ticks_per_second * self.elapsed.as_secs_f64()),
            gross_micros: per(ticks),
        }
    }
}

/// Runs `until`'s connections to `target` (two clients); the serving worker's CPU meanwhile.
/// Panics when a connection fails: the figure would not be the route's.
pub fn cpu_sample(proxy: &Proxy, target: &Target, until: &Until) -> CpuSample {
    let worker = proxy.worker_pid().expect("a serving worker");
    let before = cpu_ticks(worker).expect("worker stat");
    let started = Instant::now();
    let tally = client_loop(proxy.https, std::slice::from_ref(target), 2, until);
    let elapsed = started.elapsed();
    let after = cpu_ticks(worker).expect("worker stat");
    assert_eq!(
        tally.failures, 0,
        "connections to {} failed: {:?}",
        target.sni, tally.examples
    );
    CpuSample {
        connections: tally.attempts,
        ticks: after - before,
        elapsed,
    }
}

/// UDP datagrams the kernel dropped for a full receive buffer, machine-wide, so far
/// (`RcvbufErrors` in `/proc/net/snmp`).
pub fn udp_receive_drops() -> Option<u64> {
    let snmp = std::fs::read_to_string("/proc/net/snmp").ok()?;
    let mut udp = snmp.lines().filter(|line| line.starts_with("Udp: "));
    let (names, values) = (udp.next()?, udp.next()?);
    let at = names.split_whitespace().position(|n| n == "RcvbufErrors")?;
    values.split_whitespace().nth(at)?.parse().ok()
}

/// Queries in a phase: how many, and the most in any 1-s window (sliding).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Burst {
    pub total: usize,
    pub max_per_second: usize,
}

/// The queries received in `[from, to)`.
pub fn burst(queries: &[Query], from: Instant, to: Instant) -> Burst {
    let inside: Vec<Query> = queries
        .iter()
        .filter(|q| q.at >= from && q.at < to)
        .cloned()
        .collect();
    Burst {
        total: inside.len(),
        max_per_second: max_per_second(&inside),
    }
}

/// Steady-state rate over `[from, to)`: the average per second and the most in one of the
/// consecutive 1-s windows from `from`.
pub fn steady(queries: &[Query], from: Instant, to: Instant) -> (f64, usize) {
    let windows = per_second(queries, from, to);
    let total: usize = windows.iter().sum();
    let seconds = to.saturating_duration_since(from).as_secs_f64();
    let average = if seconds > 0.0 {
        total as f64 / seconds
    } else {
        0.0
    };
    (average, windows.into_iter().max().unwrap_or(0))
}

/// Both logs in arrival order, as one.
pub fn merged(a: Vec<Query>, b: Vec<Query>) -> Vec<Query> {
    let mut all = a;
    all.extend(b);
    all.sort_by_key(|q| q.at);
    all
}
