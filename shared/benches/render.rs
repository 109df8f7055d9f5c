//! Rendering 10,000 routes, timed: `cargo bench -p autoproxy --bench render`.
//! Prints the figures; it asserts nothing about speed (targets belong in numbers, not tests).
#![allow(clippy::print_stdout, clippy::unwrap_used)]

use std::time::{Duration, Instant};

use autoproxy::model::{RecordSet, Zone, ZoneRecords};
use autoproxy::names::HostName;
use autoproxy::render::{DEFAULT_TEMPLATE, RenderInput, RenderOptions, Renderer};
use autoproxy::rules::{DEFAULT_RULES, resolve, zone_routes};

const PROXY: &str = "peering-proxy.tools.example.com";

fn main() {
    let zones: Vec<ZoneRecords> = (0..5_000)
        .map(|i| {
            let name = format!("c{i:05}.example.internal.");
            ZoneRecords {
                zone: Zone {
                    account: format!("{:012}", 100_000_000_000u64 + (i % 50)),
                    id: format!("Z{i:08}"),
                    name: name.clone(),
                    private: true,
                },
                records: vec![
                    RecordSet::new(&format!("api.{name}"), "A", &["10.0.0.1"]),
                    RecordSet::new(&format!("proxy.api.{name}"), "CNAME", &[PROXY]),
                    RecordSet::new(&format!("\\052.int.{name}"), "CNAME", &[PROXY]),
                    RecordSet::new(
                        &format!("ingress-int.{name}"),
                        "CNAME",
                        &["elb.example.com"],
                    ),
                ],
            }
        })
        .collect();
    let proxies = [HostName::parse(PROXY).unwrap()];

    let started = Instant::now();
    let candidates: Vec<_> = zones
        .iter()
        .flat_map(|zone| zone_routes(DEFAULT_RULES, zone, &proxies).routes)
        .collect();
    let (routes, _) = resolve(candidates);
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
    println!("routes                      {}", routes.len());
    println!("match + resolve (5,000 zones) {:>8.1} ms", ms(matching));
    println!("render, fastest of 7          {:>8.1} ms", ms(times[0]));
    println!("render, median of 7           {:>8.1} ms", ms(times[3]));
    println!(
        "config size                   {:>8.1} KiB",
        size as f64 / 1024.0
    );
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
