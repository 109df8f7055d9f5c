//! What reading one zone holds in memory, by the zone's size: the pages of
//! `ListResourceRecordSets` (300 record sets each, the SDK's own types, built one at a time as
//! the client hands them over) kept as the generator keeps them ([`sift_page`] through a
//! [`Sieve`] of the rule table), then matched; beside it, the way the generator kept them
//! before (every A and CNAME set of the zone, then matched). In memory, without Route53 or
//! moto: moto takes minutes to list a zone of 50,000 records. Each read runs in a process of
//! its own (this program, started again with `--one`), and its peak is that process's peak
//! RSS (`VmHWM`), read after the match: the program's own few MB included, the same for every
//! read.
//!
//! `bench_records [--records 500,50000]`
#![allow(clippy::print_stdout, clippy::expect_used)]

use std::process::Command;

use autoproxy::model::{RecordSet, Zone, ZoneRecords};
use autoproxy::names::HostName;
use autoproxy::route53::{RECORDS_PER_PAGE, record_set, sift_page};
use autoproxy::rules::{DEFAULT_RULES, Sieve, zone_routes};
use aws_sdk_route53::types::{AliasTarget, ResourceRecord, ResourceRecordSet, RrType};

const PROXY: &str = "peering-proxy.tools.example.com";
const ZONE: &str = "c00000.bench.internal.";

/// Page `page` of a zone of `records` record sets: both rule pairs (the API pair and the
/// ingress pair, its back an alias A record), then A records (`filler`, as the scale bench
/// seeds them).
fn page(records: usize, page: usize) -> Vec<ResourceRecordSet> {
    let start = page * RECORDS_PER_PAGE as usize;
    (start..records.min(start + RECORDS_PER_PAGE as usize))
        .map(|i| {
            let (name, rtype, value) = match i {
                0 => (format!("api.{ZONE}"), RrType::A, "10.0.0.1".to_owned()),
                1 => (format!("proxy.api.{ZONE}"), RrType::Cname, PROXY.to_owned()),
                2 => (format!("\\052.int.{ZONE}"), RrType::Cname, PROXY.to_owned()),
                3 => {
                    let alias = AliasTarget::builder()
                        .dns_name("internal-k8s.elb.amazonaws.com.")
                        .hosted_zone_id("Z35SXDOTRQ7X7K")
                        .evaluate_target_health(false)
                        .build()
                        .expect("alias");
                    return ResourceRecordSet::builder()
                        .name(format!("ingress-int.{ZONE}"))
                        .r#type(RrType::A)
                        .alias_target(alias)
                        .build()
                        .expect("record set");
                }
                _ => (
                    format!("a{i:05}.{ZONE}"),
                    RrType::A,
                    format!("10.{}.{}.{}", (i >> 16) & 0xff, (i >> 8) & 0xff, i & 0xff),
                ),
            };
            ResourceRecordSet::builder()
                .name(name)
                .r#type(rtype)
                .ttl(300)
                .resource_records(ResourceRecord::builder().value(value).build().expect("rr"))
                .build()
                .expect("record set")
        })
        .collect()
}

fn zone() -> Zone {
    Zone {
        account: "100000000001".to_owned(),
        id: "Z00000BENCH".to_owned(),
        name: ZONE.to_owned(),
        private: true,
    }
}

/// The generator's read before the sieve: every A and CNAME set of every page.
fn keep_all(sets: &[ResourceRecordSet], into: &mut Vec<RecordSet>) {
    into.extend(
        sets.iter()
            .filter(|set| matches!(set.r#type(), RrType::A | RrType::Cname))
            .map(record_set),
    );
}

/// Reads and matches a zone of `records` sets one way; the sets kept and the routes found.
fn read(records: usize, sieve: bool) -> (usize, usize) {
    let proxies = [HostName::parse(PROXY).expect("proxy name")];
    let pages = records.div_ceil(RECORDS_PER_PAGE as usize);
    let read = if sieve {
        let mut sieve = Sieve::new(&DEFAULT_RULES, &zone());
        for n in 0..pages {
            sift_page(&page(records, n), &mut sieve);
        }
        sieve.finish()
    } else {
        let mut kept = Vec::new();
        for n in 0..pages {
            keep_all(&page(records, n), &mut kept);
        }
        ZoneRecords::whole(zone(), kept)
    };
    let routes = zone_routes(&DEFAULT_RULES, &read, &proxies).routes.len();
    (read.records.len(), routes)
}

/// This process's peak RSS in kB.
fn peak_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM")
}

/// One read in a process of its own: (peak kB, sets kept, routes).
fn measure(records: usize, sieve: bool) -> (u64, usize, usize) {
    let out = Command::new(std::env::current_exe().expect("this program"))
        .args([
            "--one",
            &records.to_string(),
            if sieve { "now" } else { "before" },
        ])
        .output()
        .expect("run a read");
    let text = String::from_utf8_lossy(&out.stdout);
    let fields: Vec<u64> = text
        .split_whitespace()
        .map(|n| n.parse().expect("a number"))
        .collect();
    match fields[..] {
        [peak, kept, routes] => (peak, kept as usize, routes as usize),
        _ => panic!("a read printed {text:?}"),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--one") {
        let records = args[at + 1].parse().expect("a record count");
        let (kept, routes) = read(records, args[at + 2] == "now");
        println!("{} {kept} {routes}", peak_kb());
        return;
    }
    let sizes: Vec<usize> = match args.iter().position(|a| a == "--records") {
        Some(at) => args
            .get(at + 1)
            .expect("--records takes a list")
            .split(',')
            .map(|n| n.parse().expect("a record count"))
            .collect(),
        None => vec![500, 50_000],
    };
    println!(
        "| zone's record sets | sets kept: before → now | peak RSS to read and match: before → now |"
    );
    println!("|---|---|---|");
    for records in sizes {
        let (before, kept_before, routes_before) = measure(records, false);
        let (now, kept_now, routes_now) = measure(records, true);
        assert_eq!(routes_before, routes_now, "the sieve changed the routes");
        println!(
            "| {records} | {kept_before} → {kept_now} | {before} kB → {now} kB ({routes_now} routes both) |"
        );
    }
}
