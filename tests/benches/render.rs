//! Rendering 10,000 routes, timed: `cargo bench -p autoproxy-tests --bench render`. The same
//! input as `make bench` (`bench::synthetic_routes`), without moto or HAProxy: the quick loop
//! for work on the renderer. Prints the figures; it asserts nothing about speed.
#![allow(clippy::print_stdout, clippy::unwrap_used)]

use std::time::{Duration, Instant};

use autoproxy::render::{DEFAULT_TEMPLATE, RenderInput, RenderOptions, Renderer};
use autoproxy_tests::bench::synthetic_routes;

fn main() {
    let started = Instant::now();
    let routes = synthetic_routes(5_000);
    let matching = started.elapsed();
    assert_eq!(routes.len(), 10_000);

    let renderer = Renderer::new(DEFAULT_TEMPLATE).unwrap();
    let resolvers = ["169.254.169.253:53".parse().unwrap()];
    let options = RenderOptions::default();
    let mut times: Vec<Duration> = Vec::new();
    let mut size = 0;
    for _ in 0..7 {
        let started = Instant::now();
        let rendered = renderer
            .render(&RenderInput {
                routes: &routes,
                resolvers: &resolvers,
                proxies: &[],
                options: &options,
                generation: 1,
                generated_at: "2026-01-01T00:00:00Z",
                trigger: "bench",
            })
            .unwrap();
        times.push(started.elapsed());
        size = rendered.text.len();
    }
    times.sort();
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
