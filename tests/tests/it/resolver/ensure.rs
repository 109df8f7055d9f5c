//! An apply's new names: resolved before the swap, through the running resolver or by the
//! apply itself.

use std::time::{Duration, Instant};

use autoproxy_tests::proxy::HaproxyFiles;

use autoproxy_tests::resolver::Knobs;

use super::fixture::{Fixture, QUICK, host, unused_address};

/// `addresses::ensure` as the apply calls it, for the fixture's config and DNS server.
fn ensure(f: &Fixture, names: &[String], budget: Duration) -> autoproxy_agent::addresses::Ensured {
    let config_dir = f.haproxy.config_path().parent().unwrap().to_owned();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(autoproxy_agent::addresses::ensure(
        &config_dir,
        names,
        &[],
        &[f.dns.addr()],
        autoproxy_agent::addresses::Judges {
            own: &autoproxy_agent::own::Own::default(),
            fences: &autoproxy_agent::borders::Fences::default(),
        },
        budget,
    ))
}

/// `addresses::ensure`, which the apply calls before its swap (that the apply does, through
/// a swap, is `it::apply::runtime::a_new_route_host_has_its_address_in_the_running_worker_before_its_route`):
/// new names get their addresses from the running resolver, which keeps them although its
/// config does not name them yet; with no resolver running, `ensure` resolves them itself
/// into the same file.
#[test]
fn ensure_gets_new_names_from_the_running_service_or_resolves_them_itself() {
    use autoproxy_agent::addresses::By;
    let knobs = QUICK;
    let f = Fixture::start(2, &["first", "second"]);
    let (first, second) = (f.backend_ip("first"), f.backend_ip("second"));
    f.dns.set(&host(0), &[first]);
    f.dns.set(&host(1), &[first]);
    f.dns.set("new-a.test.internal", &[second]);
    f.dns.set("new-b.test.internal", &[unused_address(7)]);
    let resolver = f.resolver(knobs);
    assert!(
        f.wait_until(Duration::from_secs(10), |f| f.file_map().len() == 2),
        "{}",
        resolver.output()
    );

    let names = vec![
        "new-a.test.internal".to_owned(),
        "new-b.test.internal".to_owned(),
        "nowhere.test.internal".to_owned(),
    ];
    let started = Instant::now();
    let ensured = ensure(&f, &names, Duration::from_secs(10));
    println!(
        "ensure through the resolver: {ensured:?} in {:?}",
        started.elapsed()
    );
    assert_eq!(ensured.by, By::Resolver);
    assert_eq!(ensured.resolved, 2, "{ensured:?}\n{}", resolver.output());
    assert_eq!(ensured.missing.len(), 1);
    assert_eq!(ensured.missing[0].0, "nowhere.test.internal");
    assert!(ensured.missing[0].1.contains("NXDOMAIN"), "{ensured:?}");
    let file = f.file_map();
    assert_eq!(file.get("new-a.test.internal"), Some(&second.to_string()));
    assert_eq!(
        file.get("new-b.test.internal"),
        Some(&unused_address(7).to_string())
    );
    // Kept, and pushed, though the installed config does not name them.
    std::thread::sleep(Duration::from_secs_f64(2.5 * knobs.refresh_seconds));
    assert!(f.file_map().contains_key("new-a.test.internal"));
    assert!(
        f.wait_until(Duration::from_secs(5), |f| f
            .running_map()
            .contains_key("new-a.test.internal")),
        "{}",
        resolver.output()
    );
    drop(resolver);

    // No resolver: ensure resolves by itself and merges into the file.
    f.dns.set("new-c.test.internal", &[unused_address(8)]);
    let ensured = ensure(
        &f,
        &["new-c.test.internal".to_owned()],
        Duration::from_secs(10),
    );
    assert_eq!(ensured.by, By::Itself, "{ensured:?}");
    assert_eq!(ensured.resolved, 1, "{ensured:?}");
    let file = f.file_map();
    assert_eq!(
        file.get("new-c.test.internal"),
        Some(&unused_address(8).to_string())
    );
    assert!(file.contains_key(&host(0)), "other entries kept: {file:?}");
}

/// An apply during a fill (a new instance's second apply, a second after its first): it waits
/// only for the hosts new to its generation, which the service asks first, not for the
/// installed config's hosts the fill has not reached yet (those stay held, and the service
/// puts them in as they resolve).
#[test]
fn an_apply_during_a_fill_waits_only_for_the_hosts_new_to_its_generation() {
    use autoproxy_agent::addresses::By;
    const NAMES: usize = 2_000;
    // A fill of 5 s: the apply comes in its first second.
    let knobs = Knobs {
        max_qps: 100,
        fill_qps: 400,
        ..Knobs::default()
    };
    let f = Fixture::start(NAMES, &["first"]);
    for i in 0..NAMES {
        f.dns.set(&host(i), &[unused_address(i)]);
    }
    f.dns.set("new-a.test.internal", &[f.backend_ip("first")]);
    let resolver = f.resolver(knobs);
    assert!(
        f.wait_until(Duration::from_secs(10), |f| f.file_map().len() >= 20),
        "the fill started: {}",
        resolver.output()
    );
    let mut names: Vec<String> = (0..NAMES).map(host).collect();
    names.push("new-a.test.internal".to_owned());
    let started = Instant::now();
    let ensured = ensure(&f, &names, Duration::from_secs(2));
    let took = started.elapsed();
    println!(
        "ensure during a fill: {} resolved, {} missing, in {took:?}",
        ensured.resolved,
        ensured.missing.len()
    );
    assert_eq!(ensured.by, By::Resolver);
    assert!(
        !ensured
            .missing
            .iter()
            .any(|(n, _)| n == "new-a.test.internal"),
        "the new host has its address: {:?}",
        ensured
            .missing
            .iter()
            .find(|(n, _)| n == "new-a.test.internal")
    );
    assert!(
        !ensured.missing.is_empty(),
        "the fill was under way: {ensured:?}"
    );
    // The budget is 2 s, and the service answers by 1.5 s what it has then: waiting for the
    // fill's hosts ends there. The new host's turn and a push or two take a fraction of it
    // (0.15-0.6 s here on a loaded machine; the benchmark measures it on a quiet one).
    assert!(
        took < Duration::from_millis(1_400),
        "ensure during a fill took {took:?}\n{}",
        resolver.output()
    );
}
