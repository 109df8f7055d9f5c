//! Added latency: the time from a client's connect to the backend's first byte, the client
//! sending a ClientHello at once and the backend answering once it has read it, direct to the
//! backend, through the published config and through the minimal one. Idle (one client, one
//! connection after another) and at a fixed connection rate near what the machine reaches
//! through the published config (several paced clients); the three paths take turns.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use autoproxy_tests::dataplane::{Proxy, Target};

/// Turns of each path, idle and loaded.
const ROUNDS: usize = 5;
/// Connections per path and idle turn.
const IDLE_TURN: usize = 200;
/// Clients at once, loaded.
pub(super) const CLIENTS: usize = 8;
/// How long each path runs per loaded turn.
const LOADED_TURN: Duration = Duration::from_millis(1000);
/// The loaded rate, as a share of what [`CLIENTS`] closed-loop clients reach through the
/// published config.
pub(super) const LOAD_SHARE: f64 = 0.8;

/// The 50th and 99th percentiles of a set of first-byte times.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Percentiles {
    pub(super) p50: Duration,
    pub(super) p99: Duration,
    pub(super) count: usize,
}

impl Percentiles {
    fn of(mut times: Vec<Duration>) -> Percentiles {
        times.sort();
        let at = |share: usize| {
            let index = (times.len() * share / 100).min(times.len().saturating_sub(1));
            times.get(index).copied().unwrap_or_default()
        };
        Percentiles {
            p50: at(50),
            p99: at(99),
            count: times.len(),
        }
    }
}

/// Direct, through the published config, through the minimal one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Paths {
    pub(super) direct: Percentiles,
    pub(super) published: Percentiles,
    pub(super) floor: Percentiles,
}

/// Idle, and at [`Latency::rate`] connections per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Latency {
    pub(super) idle: Paths,
    pub(super) loaded: Paths,
    /// What [`CLIENTS`] closed-loop clients reached through the published config.
    pub(super) capacity: f64,
    pub(super) rate: f64,
}

/// One path: where to connect, and the SNIs to send in turn.
#[derive(Clone)]
struct Path {
    addr: SocketAddr,
    hellos: Vec<Vec<u8>>,
}

/// Connect, ClientHello, first byte: its time; then the answer read to its end.
fn first_byte(addr: SocketAddr, hello: &[u8]) -> Result<Duration, String> {
    let started = Instant::now();
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .map_err(|err| format!("connect to {addr}: {err}"))?;
    let _ = stream.set_nodelay(true);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    stream
        .write_all(hello)
        .map_err(|err| format!("send to {addr}: {err}"))?;
    let mut byte = [0u8; 1];
    stream
        .read_exact(&mut byte)
        .map_err(|err| format!("read from {addr}: {err}"))?;
    let took = started.elapsed();
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    Ok(took)
}

/// Both loads on the three paths; `targets` give the SNIs (the floor ignores them).
pub(super) fn measure(
    direct: SocketAddr,
    published: &Proxy,
    floor: &Proxy,
    targets: &[&Target],
) -> Latency {
    let hellos: Vec<Vec<u8>> = targets
        .iter()
        .map(|t| autoproxy_tests::proxy::client_hello(&t.sni))
        .collect();
    let path = |addr| Path {
        addr,
        hellos: hellos.clone(),
    };
    let paths = [path(direct), path(published.https), path(floor.https)];
    let idle = in_turns(&paths, |path| sequential(path, IDLE_TURN));
    let capacity = closed_loop(&paths[1], Duration::from_secs(1));
    let rate = capacity * LOAD_SHARE;
    let loaded = in_turns(&paths, |path| paced(path, rate, LOADED_TURN));
    let latency = Latency {
        idle,
        loaded,
        capacity,
        rate,
    };
    println!("latency: {latency:?}");
    latency
}

/// [`ROUNDS`] turns of `run` on each path, the first of each turn rotating.
fn in_turns(paths: &[Path; 3], run: impl Fn(&Path) -> Vec<Duration>) -> Paths {
    let [direct, published, floor]: [Percentiles; 3] =
        each_in_turns(paths, run).try_into().expect("three paths");
    Paths {
        direct,
        published,
        floor,
    }
}

/// [`ROUNDS`] turns of `run` on each of `paths`, the first of each turn rotating.
fn each_in_turns(paths: &[Path], run: impl Fn(&Path) -> Vec<Duration>) -> Vec<Percentiles> {
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); paths.len()];
    for round in 0..ROUNDS {
        for offset in 0..paths.len() {
            let index = (round + offset) % paths.len();
            times[index].extend(run(&paths[index]));
        }
    }
    times.into_iter().map(Percentiles::of).collect()
}

/// The idle first-byte times through each of `proxies`, in turns.
pub(super) fn idle_each(proxies: &[Proxy], targets: &[&Target]) -> Vec<Percentiles> {
    let hellos: Vec<Vec<u8>> = targets
        .iter()
        .map(|t| autoproxy_tests::proxy::client_hello(&t.sni))
        .collect();
    let paths: Vec<Path> = proxies
        .iter()
        .map(|proxy| Path {
            addr: proxy.https,
            hellos: hellos.clone(),
        })
        .collect();
    each_in_turns(&paths, |path| sequential(path, IDLE_TURN))
}

/// `count` connections, one after another.
fn sequential(path: &Path, count: usize) -> Vec<Duration> {
    (0..count)
        .map(|i| {
            first_byte(path.addr, &path.hellos[i % path.hellos.len()])
                .unwrap_or_else(|err| panic!("{err}"))
        })
        .collect()
}

/// What [`CLIENTS`] clients, each connecting again as soon as it is answered, reach in
/// `time`: connections per second.
fn closed_loop(path: &Path, time: Duration) -> f64 {
    let started = Instant::now();
    let total: usize = std::thread::scope(|scope| {
        let clients: Vec<_> = (0..CLIENTS)
            .map(|client| {
                scope.spawn(move || {
                    let mut done = 0;
                    while started.elapsed() < time {
                        let hello = &path.hellos[(client + done) % path.hellos.len()];
                        first_byte(path.addr, hello).unwrap_or_else(|err| panic!("{err}"));
                        done += 1;
                    }
                    done
                })
            })
            .collect();
        clients
            .into_iter()
            .map(|c| c.join().expect("a client"))
            .sum()
    });
    total as f64 / started.elapsed().as_secs_f64()
}

/// [`CLIENTS`] clients starting connections at `rate` per second in all, evenly spaced, for
/// `time`; a client late for its next start goes at once.
fn paced(path: &Path, rate: f64, time: Duration) -> Vec<Duration> {
    let interval = Duration::from_secs_f64(CLIENTS as f64 / rate.max(1.0));
    let started = Instant::now();
    std::thread::scope(|scope| {
        let clients: Vec<_> = (0..CLIENTS)
            .map(|client| {
                scope.spawn(move || {
                    let mut times = Vec::new();
                    let mut next = started + interval.mul_f64(client as f64 / CLIENTS as f64);
                    while next < started + time {
                        std::thread::sleep(next.saturating_duration_since(Instant::now()));
                        let hello = &path.hellos[(client + times.len()) % path.hellos.len()];
                        times.push(first_byte(path.addr, hello).unwrap_or_else(|e| panic!("{e}")));
                        next += interval;
                    }
                    times
                })
            })
            .collect();
        clients
            .into_iter()
            .flat_map(|c| c.join().expect("a client"))
            .collect()
    })
}
