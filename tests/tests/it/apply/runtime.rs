//! Route changes applied to the running HAProxy over its runtime API: no reload, the same
//! worker, held connections untouched, the running maps equal to the files; and every way
//! out of that path (a structural change, a failed update, a restart) still converges.

use std::net::Ipv4Addr;

use autoproxy::model::Route;
use autoproxy::names::HostName;
use autoproxy_tests::stream::{Held, streamer};

use super::*;

/// A route from `proxy.api.<zone>` to `ip` on the backends' port.
fn route_to(f: &Fixture, zone: &str, ip: Ipv4Addr) -> Route {
    let mut route = proxy::api_route(zone, f.backends.get("a"));
    route.back = HostName::parse(&ip.to_string()).unwrap();
    route
}

const STREAMER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 60);

/// Options whose `hard-stop-after` is short: a reload would cut a held connection within
/// a second, so its survival shows that none happened.
fn short_stop(f: &Fixture) -> autoproxy::render::RenderOptions {
    let mut options = f.haproxy.options(f.backends.port);
    options.hard_stop_after = "1s".to_owned();
    options
}

/// A host only DNS turns into an address (backend a's, where a test's server answers).
const NAMED: &str = "api.named.test";

/// Backend a's address.
fn a_ip(f: &Fixture) -> Ipv4Addr {
    let SocketAddr::V4(a) = f.backends.get("a").addr else {
        unreachable!("IPv4 backends")
    };
    *a.ip()
}

/// A config of `generation`: `proxy.api.g1.test` → backend a by address and, when `named`,
/// `proxy.api.named.test` → [`NAMED`] on backend a's port, with these nameservers.
fn named_config(f: &Fixture, generation: u64, named: bool, nameservers: &[SocketAddr]) -> String {
    let mut routes = vec![proxy::api_route("g1.test", f.backends.get("a"))];
    if named {
        let mut route = proxy::api_route("named.test", f.backends.get("a"));
        route.back = HostName::parse(NAMED).unwrap();
        routes.push(route);
    }
    proxy::render_with(generation, &routes, &short_stop(f), nameservers)
}

/// A config of `generation` with the held route and `proxy.api.gN.test` → backend a for
/// every N in `zones`.
fn config(f: &Fixture, generation: u64, zones: &[u64]) -> String {
    let mut routes = vec![route_to(f, "hold.test", STREAMER)];
    for zone in zones {
        routes.push(proxy::api_route(
            &format!("g{zone}.test"),
            f.backends.get("a"),
        ));
    }
    proxy::render(generation, &routes, &short_stop(f))
}

/// The entries HAProxy holds in a map, sorted, as `key value` lines.
pub(super) fn held_map(f: &Fixture, map: &str) -> Vec<String> {
    let answer = f.haproxy.stats_command(&format!("show map {map}")).unwrap();
    let mut entries: Vec<String> = answer
        .lines()
        .filter_map(|line| line.split_once(' ').map(|(_, entry)| entry.to_owned()))
        .collect();
    entries.sort();
    entries
}

pub(super) fn file_map(f: &Fixture, map: &str) -> Vec<String> {
    let text = std::fs::read_to_string(f.haproxy.dir().join(map)).unwrap();
    let mut entries: Vec<String> = text.lines().map(str::to_owned).collect();
    entries.sort();
    entries
}

#[track_caller]
pub(super) fn assert_maps_equal_files(f: &Fixture) {
    let maps = MapFiles::stable();
    for map in [maps.routes, maps.suffixes, maps.generation.unwrap()] {
        // The address service changes the running map, then writes the file: a check made
        // the moment a route serves can fall between the two. Within a few seconds they agree.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while held_map(f, &map) != file_map(f, &map) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(held_map(f, &map), file_map(f, &map), "{map}");
    }
}

#[track_caller]
fn assert_applied_without_reload(run: &Run, generation: u64) {
    assert!(run.success(), "{run}");
    assert!(run.step("reload").is_empty(), "a reload:\n{run}");
    assert!(
        run.step("done")[0].starts_with(&format!(
            "generation {generation} is running, without a reload"
        )),
        "{run}"
    );
}

#[test]
fn route_changes_keep_the_worker_and_a_held_connection() {
    let f = Fixture::new(&["a"]);
    let _streamer = streamer(STREAMER, f.backends.port).unwrap();
    f.install_first(&config(&f, 1, &[1]));
    let mut held = Held::open(f.haproxy.https, "proxy.api.hold.test").unwrap();
    let worker = f.haproxy.worker_pid();

    // Routes added, removed, added back: each change its own generation.
    let changes: [&[u64]; 6] = [&[1, 2], &[2], &[2, 3, 4], &[], &[5], &[1, 5]];
    for (index, zones) in changes.iter().enumerate() {
        let generation = 2 + index as u64;
        let run = f.apply(&f.upload(&config(&f, generation, zones)));
        assert_applied_without_reload(&run, generation);
        assert_eq!(f.haproxy.worker_pid(), worker, "generation {generation}");
        assert_eq!(f.haproxy.running_generation(), Some(generation));
        assert_maps_equal_files(&f);
        for zone in 1..=5 {
            let zone_name = format!("g{zone}.test");
            if zones.contains(&zone) {
                f.assert_routes(&zone_name, "a");
            } else {
                f.assert_no_route(&zone_name);
            }
        }
        if let Err(end) = held.alive() {
            panic!("the held connection ended after generation {generation}: {end}");
        }
    }
    // Longer than hard-stop-after: a reload would have cut it by now.
    std::thread::sleep(Duration::from_millis(1500));
    if let Err(end) = held.alive() {
        panic!("the held connection ended 1.5 s after the last change: {end}");
    }
    assert_eq!(
        f.haproxy.processes().len(),
        2,
        "one master and one worker: {:?}",
        f.haproxy.processes()
    );
}

/// The distribution's HAProxy as a package leaves it running: its default config, a stats
/// socket (where this instance's configs declare theirs) and no frontend, no generation of ours.
fn distribution_default(f: &Fixture) -> String {
    format!(
        "global\n\tstats socket {} mode 660 level admin\n\tstats timeout 30s\n\ndefaults\n\tmode\thttp\n\toption\thttplog\n\ttimeout connect 5000\n\ttimeout client  50000\n\ttimeout server  50000\n",
        f.haproxy.stats_socket().display()
    )
}

/// A first install does not wait for its hosts' addresses, whether no HAProxy runs yet or the
/// distribution's runs its default config (with a stats socket that answers): no route of ours
/// serves, so waiting gains nothing, and `/ready` gates the traffic while the address service
/// fills the map. Here the resolver drops every query: an apply that asked would spend its
/// whole address budget on time-outs.
#[test]
fn a_first_install_does_not_spend_its_address_budget() {
    for distribution_runs in [false, true] {
        let f = Fixture::new(&["a"]);
        if distribution_runs {
            std::fs::write(f.haproxy.config_path(), distribution_default(&f)).unwrap();
            let started = std::process::Command::new(f.haproxy.dir().join("reload.sh"))
                .status()
                .unwrap();
            assert!(started.success(), "{}", f.haproxy.log());
            assert!(f.haproxy.worker_pid().is_some(), "{}", f.haproxy.log());
        }
        let dns = DnsServer::start("127.0.0.1:0".parse().unwrap()).unwrap();
        dns.set(NAMED, &[a_ip(&f)]);
        dns.drop_queries(NAMED, true);
        let text = named_config(&f, 1, true, &[dns.addr()]);
        let run = f.apply(&f.upload(&text));
        assert!(run.success(), "{run}");
        assert!(
            run.step("addresses")[0].contains("1 new host(s), none waited for"),
            "distribution's HAProxy running: {distribution_runs}\n{run}"
        );
        let asked = dns.queries().iter().filter(|q| q.name == NAMED).count();
        assert_eq!(asked, 0, "the apply asked DNS itself:\n{run}");
        assert_eq!(f.haproxy.running_generation(), Some(1), "{run}");
    }
}

#[test]
fn a_new_route_host_has_its_address_in_the_running_worker_before_its_route() {
    // No address service runs here: the apply resolves the new host itself, and the running
    // worker must get that address from the apply, or the route would not serve.
    let f = Fixture::new(&["a"]);
    let dns = DnsServer::start("127.0.0.1:0".parse().unwrap()).unwrap();
    dns.set(NAMED, &[a_ip(&f)]);
    let config = |generation: u64, named: bool| named_config(&f, generation, named, &[dns.addr()]);
    f.install_first(&config(1, false));

    let run = f.apply(&f.upload(&config(2, true)));
    assert_applied_without_reload(&run, 2);
    assert!(
        run.step("addresses")[0].contains("1 new host(s): 1 resolved"),
        "{run}"
    );
    assert!(
        run.step("update")[0].contains("gave the running HAProxy 1 address(es)"),
        "{run}"
    );
    f.assert_routes("named.test", "a");
    let held = held_map(&f, &MapFiles::stable().addresses);
    assert!(held.contains(&format!("{NAMED} {}", a_ip(&f))), "{held:?}");
}

/// A busy address service (its control socket listens but takes no connection) is alive: it
/// stays the one writer of the worker's address map, and the apply must not push the file's
/// addresses itself, as it does when no service listens.
#[test]
fn a_busy_address_service_is_not_taken_for_an_absent_one() {
    let f = Fixture::new(&["a"]);
    let no_dns = [SocketAddr::from((Ipv4Addr::LOCALHOST, 53))];
    let config = |generation: u64, named: bool| named_config(&f, generation, named, &no_dns);
    f.install_first(&config(1, false));
    // The file holds the host (the service wrote it), the worker not yet (the service has
    // not pushed it): what the apply would push by itself.
    let addresses = f.haproxy.dir().join(MapFiles::stable().addresses);
    let mut file = std::fs::read_to_string(&addresses).unwrap_or_default();
    file.push_str(&format!("{NAMED} {}\n", a_ip(&f)));
    std::fs::write(&addresses, file).unwrap();
    // A listener with a backlog of 0 and one connection queued: a connect finds it full.
    let socket = f.haproxy.dir().join("autoproxy/resolver.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    nix::sys::socket::listen(&listener, nix::sys::socket::Backlog::new(0).unwrap()).unwrap();
    let _queued = std::os::unix::net::UnixStream::connect(&socket).unwrap();

    let run = f.apply(&f.upload(&config(2, true)));
    assert_applied_without_reload(&run, 2);
    assert!(
        !run.stdout.contains("gave the running HAProxy"),
        "the apply wrote the worker's address map beside a busy service:\n{run}"
    );
    let held = held_map(&f, &MapFiles::stable().addresses);
    assert!(!held.contains(&format!("{NAMED} {}", a_ip(&f))), "{held:?}");
}

#[test]
fn a_structural_change_still_reloads() {
    let f = Fixture::new(&["a"]);
    f.install_first(&config(&f, 1, &[1]));
    let worker = f.haproxy.worker_pid();
    let mut options = short_stop(&f);
    options.maxconn = 1_999;
    let routes = [proxy::api_route("g1.test", f.backends.get("a"))];
    let run = f.apply(&f.upload(&proxy::render(2, &routes, &options)));
    assert!(run.success(), "{run}");
    assert!(
        run.step("install")[0].contains("reloading: the config changed beyond its route tables"),
        "{run}"
    );
    assert_eq!(run.step("reload").len(), 1, "{run}");
    assert_ne!(f.haproxy.worker_pid(), worker);
    assert_eq!(f.haproxy.running_generation(), Some(2));
    assert_maps_equal_files(&f);
    f.assert_routes("g1.test", "a");
}

#[test]
fn a_runtime_update_haproxy_refuses_falls_back_to_a_reload() {
    // A buffer too small for the agent's payload chunks: HAProxy drops the stats connection
    // on the first oversized `add map` (2.6 and 3.0 alike reset it with these chunks), while
    // the new versions are filled and before any commit. (A stop between the two commits is
    // the fault matrix's `update` point.)
    let f = Fixture::new(&["a"]);
    let small_buffers = |text: String| {
        let body = artifact::body(&text).replacen(
            "    master-worker\n",
            "    master-worker\n    tune.bufsize 4096\n",
            1,
        );
        restamp(&text, &body)
    };
    f.install_first(&small_buffers(config(&f, 1, &[1])));
    let worker = f.haproxy.worker_pid();

    let mut routes = vec![
        route_to(&f, "hold.test", STREAMER),
        proxy::api_route("g2.test", f.backends.get("a")),
    ];
    for index in 0..200 {
        let mut suffix = proxy::api_route(&format!("s{index}.test"), f.backends.get("a"));
        suffix.sni = format!(".int.s{index}.example.internal");
        suffix.sni_match = SniMatch::Suffix;
        routes.push(suffix);
    }
    let second = small_buffers(proxy::render(2, &routes, &short_stop(&f)));
    let run = f.apply(&f.upload(&second));
    assert!(run.success(), "{run}{}", f.haproxy.log());
    let install = run.step("install");
    assert!(
        install
            .iter()
            .any(|line| line
                .starts_with("reloading: the running HAProxy did not take the new routes")),
        "{run}"
    );
    assert_eq!(run.step("reload").len(), 1, "{run}");
    assert_ne!(f.haproxy.worker_pid(), worker);
    assert_eq!(f.haproxy.running_generation(), Some(2));
    assert_maps_equal_files(&f);
    f.assert_routes("g2.test", "a");
    f.assert_no_route("g1.test");
    assert_eq!(
        f.haproxy.probe("x.int.s7.example.internal").unwrap(),
        f.backends.get("a").banner()
    );
}

#[test]
fn a_restart_serves_from_disk_what_the_runtime_held() {
    let f = Fixture::new(&["a"]);
    f.install_first(&config(&f, 1, &[1]));
    for (generation, zones) in [(2, &[1, 2][..]), (3, &[2, 3][..])] {
        let run = f.apply(&f.upload(&config(&f, generation, zones)));
        assert_applied_without_reload(&run, generation);
    }
    let before: Vec<Vec<String>> = [MapFiles::stable().routes, MapFiles::stable().suffixes]
        .iter()
        .map(|map| held_map(&f, map))
        .collect();

    f.haproxy.stop();
    assert_eq!(f.haproxy.running_generation(), None);
    // Started from the files as they are: nothing rewritten first.
    let status = std::process::Command::new(f.haproxy.dir().join("reload.sh"))
        .status()
        .unwrap();
    assert!(status.success());
    assert!(
        f.haproxy.wait_for_generation(3, Duration::from_secs(10)),
        "{}",
        f.haproxy.log()
    );
    assert_eq!(f.haproxy.running_generation(), Some(3));
    let after: Vec<Vec<String>> = [MapFiles::stable().routes, MapFiles::stable().suffixes]
        .iter()
        .map(|map| held_map(&f, map))
        .collect();
    assert_eq!(after, before);
    assert_maps_equal_files(&f);
    f.assert_routes("g3.test", "a");
    f.assert_no_route("g1.test");
}

#[test]
fn generations_stay_monotonic_through_both_paths() {
    let f = Fixture::new(&["a"]);
    f.install_first(&config(&f, 1, &[1]));
    let mut structural = short_stop(&f);
    structural.maxconn = 1_999;
    let routes = |zones: &[u64]| -> Vec<Route> {
        zones
            .iter()
            .map(|zone| proxy::api_route(&format!("g{zone}.test"), f.backends.get("a")))
            .collect()
    };
    // (generation, config, how it must end)
    let steps: Vec<(u64, String, &str)> = vec![
        (2, config(&f, 2, &[2]), "without a reload"),
        (
            4,
            proxy::render(4, &routes(&[4]), &structural),
            "after a reload",
        ),
        (3, config(&f, 3, &[3]), "skip"),
        (4, proxy::render(4, &routes(&[4]), &structural), "skip"),
        (
            5,
            proxy::render(5, &routes(&[5]), &structural),
            "without a reload",
        ),
        (7, config(&f, 7, &[7]), "after a reload"),
        (6, config(&f, 6, &[6]), "skip"),
        (8, config(&f, 8, &[8]), "without a reload"),
    ];
    let mut running = 1;
    for (generation, text, how) in steps {
        let (run, record) = f.apply_and_record(&f.upload(&text));
        assert!(run.success(), "{run}");
        if how == "skip" {
            assert_eq!(run.step("skip").len(), 1, "generation {generation}:\n{run}");
        } else {
            running = generation;
            assert!(
                run.step("done")[0].contains(how),
                "generation {generation} should run {how}:\n{run}"
            );
        }
        assert_eq!(f.haproxy.running_generation(), Some(running), "{run}");
        assert_eq!(record["generation"], running, "{record}");
        f.assert_routes(&format!("g{running}.test"), "a");
    }
}
