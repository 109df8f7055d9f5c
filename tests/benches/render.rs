//! Rendering 10,000 routes, timed: `cargo bench -p autoproxy-tests --bench render`. The same
//! input as `make bench` (`bench::synthetic_routes`), without moto or HAProxy: the quick loop
//! for work on the renderer. Prints the figures; it asserts nothing about speed.
#![allow(clippy::print_stdout, clippy::unwrap_used)]

use std::time::{Duration, Instant};

use autoproxy_tests::bench::{render_times, synthetic_routes};

fn main() {
    let started = Instant::now();
    let routes = synthetic_routes(5_000);
    let matching = started.elapsed();
    assert_eq!(routes.len(), 10_000);

    let (times, text) = render_times(&routes, 7);
    let size = text.len();
    println!("routes                               {}", routes.len());
    println!(
        "build, match, resolve (5,000 zones)  {:>8.1} ms",
        ms(matching)
    );
    println!(
        "render, fastest of 7                 {:>8.1} ms",
        ms(times[0])
    );
    println!(
        "render, median of 7                  {:>8.1} ms",
        ms(times[3])
    );
    println!(
        "config size                          {:>8.1} KiB",
        size as f64 / 1024.0
    );
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
