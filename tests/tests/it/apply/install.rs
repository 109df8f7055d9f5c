//! Installing: a first config, a new one, what is refused before anything is touched, what is skipped, and the route maps.

use super::*;

#[test]
fn a_first_install_then_a_new_config_goes_live() {
    let f = Fixture::new(&["a", "b"]);
    let first = f.config(1, &[("g1.test", "a")]);
    let version = f.upload(&first);
    let run = f.apply(&version);
    assert!(run.success(), "{run}{}", f.haproxy.log());
    assert!(run.step("keep")[0].contains("nothing to keep"), "{run}");
    assert_eq!(f.haproxy.running_generation(), Some(1));
    f.assert_routes("g1.test", "a");
    f.assert_no_route("g2.test");

    // A new route only: applied to the running worker, no reload.
    let worker = f.haproxy.worker_pid();
    let second = f.config(2, &[("g1.test", "a"), ("g2.test", "b")]);
    let version = f.upload(&second);
    let run = f.apply(&version);
    assert!(run.success(), "{run}{}", f.haproxy.log());
    for step in [
        "lock", "download", "verify", "keep", "update", "swap", "done",
    ] {
        assert_eq!(run.step(step).len(), 1, "one {step} line:\n{run}");
    }
    assert!(run.step("reload").is_empty(), "no reload:\n{run}");
    assert!(
        run.step("done")[0].starts_with("generation 2 is running, without a reload"),
        "{run}"
    );
    assert_eq!(f.haproxy.worker_pid(), worker, "the same worker serves");
    assert_eq!(f.haproxy.running_generation(), Some(2));
    f.assert_routes("g2.test", "b");
    f.assert_routes("g1.test", "a");
    assert_eq!(f.installed(), second);
    assert_eq!(f.last_good().as_deref(), Some(first.as_str()));
    assert_eq!(temp_files(f.haproxy.dir()), Vec::<String>::new());
}

#[test]
fn a_config_haproxy_rejects_is_not_installed_and_the_old_one_keeps_serving() {
    let f = Fixture::new(&["a", "b"]);
    let first = f.config(1, &[("g1.test", "a")]);
    f.install_first(&first);

    let second = f.config(2, &[("g1.test", "a"), ("g2.test", "b")]);
    let body = artifact::body(&second).replace("defaults\n", "defaults\n    no-such-keyword on\n");
    let broken = restamp(&second, &body);
    let run = f.apply(&f.upload(&broken));
    assert_eq!(run.status, Some(1), "{run}");
    let failure = run.failure().expect("a FAILED line");
    assert!(
        failure.contains("haproxy -c rejected generation 2"),
        "{run}"
    );
    assert!(
        failure.contains("no-such-keyword"),
        "the reason names the problem:\n{run}"
    );
    assert!(
        failure.ends_with("nothing changed (running generation 1)"),
        "{run}"
    );
    assert_eq!(f.installed(), first);
    assert_eq!(f.last_good(), None, "step 5 never ran");
    assert_eq!(f.haproxy.running_generation(), Some(1));
    f.assert_routes("g1.test", "a");
    f.assert_no_route("g2.test");
    assert_eq!(temp_files(f.haproxy.dir()), Vec::<String>::new());
}

#[test]
fn a_body_that_does_not_match_its_sha256_is_rejected_before_anything_is_touched() {
    let f = Fixture::new(&["a", "b"]);
    let first = f.config(1, &[("g1.test", "a")]);
    f.install_first(&first);
    let before = snapshot(f.haproxy.dir());

    let second = f.config(2, &[("g1.test", "a"), ("g2.test", "b")]);
    let tampered = second.replace("proxy.api.g2.test", "proxy.api.evil.test");
    assert_ne!(tampered, second);
    let run = f.apply(&f.upload(&tampered));
    assert_eq!(run.status, Some(1), "{run}");
    assert!(run.failure().unwrap().contains("sha256 mismatch"), "{run}");
    assert!(run.step("check").is_empty(), "haproxy -c never ran:\n{run}");
    // Same files, same bytes (the lock file exists since the first install).
    assert_eq!(snapshot(f.haproxy.dir()), before, "nothing touched");
    assert_eq!(f.haproxy.running_generation(), Some(1));
    f.assert_no_route("evil.test");
}

#[test]
fn an_older_or_equal_generation_is_skipped() {
    let f = Fixture::new(&["a", "b"]);
    let third = f.config(3, &[("g3.test", "a")]);
    f.install_first(&third);

    let same = f.config(3, &[("g3.test", "a"), ("other.test", "b")]);
    let older = f.config(2, &[("g2.test", "b")]);
    for text in [same, older] {
        let run = f.apply(&f.upload(&text));
        assert!(run.success(), "{run}{}", f.haproxy.log());
        let skip = run.step("skip");
        assert_eq!(skip.len(), 1, "{run}");
        assert!(
            skip[0].contains("not newer than the running generation 3"),
            "{run}"
        );
        assert!(
            run.step("check").is_empty() && run.step("reload").is_empty(),
            "{run}"
        );
    }
    assert_eq!(f.installed(), third);
    assert_eq!(f.last_good(), None);
    assert_eq!(f.haproxy.running_generation(), Some(3));
    f.assert_routes("g3.test", "a");
}

#[test]
fn an_empty_config_version_installs_the_latest() {
    let f = Fixture::new(&["a", "b"]);
    f.upload(&f.config(1, &[("g1.test", "a")]));
    let latest = f.upload(&f.config(2, &[("g2.test", "b")]));
    // The association passes no version: the default is empty.
    let run = f.run(&[]);
    assert!(run.success(), "{run}{}", f.haproxy.log());
    assert!(
        run.step("download")[0].contains(&format!("version {latest}")),
        "{run}"
    );
    assert_eq!(f.haproxy.running_generation(), Some(2));
    f.assert_routes("g2.test", "b");

    let newest = f.upload(&f.config(3, &[("g3.test", "a")]));
    let run = f.apply("");
    assert!(run.success(), "{run}{}", f.haproxy.log());
    assert!(
        run.step("download")[0].contains(&format!("version {newest}")),
        "{run}"
    );
    assert_eq!(f.haproxy.running_generation(), Some(3));
    f.assert_routes("g3.test", "a");
}

/// What the maps directory holds but the address map: the stable maps, and any directory or
/// staging left behind.
fn map_dirs(f: &Fixture) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(f.haproxy.dir().join("autoproxy"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name != "addresses.map")
        .collect();
    names.sort();
    names
}

/// What the maps' directory holds between applies: the three route maps, last-known-good's
/// copies of them (kept byte for byte for a rollback), the last apply's record and the
/// address map's lock (the address map itself aside).
const STABLE: [&str; 8] = [
    "addresses.map.lock",
    "generation.map",
    "generation.map.last-good",
    "last-apply.json",
    "routes.map",
    "routes.map.last-good",
    "suffixes.map",
    "suffixes.map.last-good",
];

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

#[test]
fn route_maps_are_installed_and_rolled_back_with_their_generation() {
    let f = Fixture::new(&["a", "b"]);
    let first = f.config(1, &[("g1.test", "a")]);
    f.install_first(&first);
    let maps = f.haproxy.dir().join("autoproxy");
    let a = f.backends.get("a").addr;
    let route_a = |sni: &str| format!("proxy.api.{sni} {}:{}\n", a.ip(), a.port());
    assert_eq!(read(&maps.join("routes.map")), route_a("g1.test"));
    assert_eq!(read(&maps.join("suffixes.map")), "");
    assert_eq!(read(&maps.join("generation.map")), "running 1\n");
    assert!(maps.join("addresses.map").is_file());

    let second = f.config(2, &[("g1.test", "a"), ("g2.test", "b")]);
    let run = f.apply(&f.upload(&second));
    assert!(run.success(), "{run}");
    assert!(
        run.step("maps")
            .iter()
            .any(|l| l.contains("2 exact, 0 suffix routes")),
        "{run}"
    );
    assert_eq!(map_dirs(&f), STABLE, "nothing staged is left behind");
    assert_eq!(read(&maps.join("generation.map")), "running 2\n");

    let third = f.config(3, &[("g3.test", "a")]);
    assert!(f.apply(&f.upload(&third)).success());
    assert_eq!(read(&maps.join("routes.map")), route_a("g3.test"));
    f.assert_routes("g3.test", "a");
    f.assert_no_route("g2.test");

    // A generation that cannot start rolls back to last-known-good's config, and its maps
    // written from that config's own route lines.
    let squatter = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut options = f.haproxy.options(f.backends.port);
    options.http_bind = squatter.local_addr().unwrap().to_string();
    let fourth = f.config_with(4, &[("g4.test", "b")], &options);
    let run = f.apply(&f.upload(&fourth));
    assert_eq!(run.status, Some(2), "{run}");
    assert!(
        run.step("install")[0].contains("reloading: the config changed beyond its route tables"),
        "{run}"
    );
    assert_eq!(f.haproxy.running_generation(), Some(3));
    f.assert_routes("g3.test", "a");
    f.assert_no_route("g4.test");
    assert_eq!(read(&maps.join("routes.map")), route_a("g3.test"));
    assert_eq!(read(&maps.join("generation.map")), "running 3\n");
    drop(squatter);

    let fifth = f.config(5, &[("g5.test", "b")]);
    assert!(f.apply(&f.upload(&fifth)).success());
    assert_eq!(map_dirs(&f), STABLE);
    f.assert_routes("g5.test", "b");
}

/// A config of the layout earlier versions rendered: route maps in a directory of their
/// generation, and no generation map.
fn per_generation(config: &str, generation: u64) -> String {
    let stable = MapFiles::stable();
    let legacy = MapFiles::per_generation(generation);
    let body = artifact::body(config)
        .replace(&stable.routes, &legacy.routes)
        .replace(&stable.suffixes, &legacy.suffixes)
        .lines()
        .filter(|line| !line.contains("generation.map") && !line.contains("X-Autoproxy-Routes"))
        .map(|line| format!("{line}\n"))
        .collect::<String>();
    restamp(config, &body)
}

#[test]
fn a_fleet_on_per_generation_maps_moves_to_the_stable_ones_with_one_reload() {
    let f = Fixture::new(&["a", "b"]);
    let first = per_generation(&f.config(1, &[("g1.test", "a")]), 1);
    let run = f.apply(&f.upload(&first));
    assert!(run.success(), "{run}{}", f.haproxy.log());
    assert_eq!(
        map_dirs(&f),
        ["addresses.map.lock", "gen-1", "last-apply.json"]
    );
    f.assert_routes("g1.test", "a");

    let second = f.config(2, &[("g2.test", "b")]);
    let run = f.apply(&f.upload(&second));
    assert!(run.success(), "{run}{}", f.haproxy.log());
    assert!(
        run.step("install")[0].contains("reloading: the running HAProxy holds no generation map"),
        "{run}"
    );
    f.assert_routes("g2.test", "b");
    assert_eq!(f.haproxy.running_generation(), Some(2));

    // Last-known-good (generation 1) keeps its directory until it is replaced.
    let third = f.config(3, &[("g3.test", "b")]);
    let run = f.apply(&f.upload(&third));
    assert!(run.success(), "{run}");
    assert_eq!(run.step("update").len(), 1, "{run}");
    assert_eq!(map_dirs(&f), STABLE);
}

/// A config of the per-route layout: one backend whose server `host` HAProxy resolves
/// through `dns`, for the SNI `proxy.api.<zone>`.
fn per_route_config(
    f: &Fixture,
    generation: u64,
    zone: &str,
    host: &str,
    dns: SocketAddr,
) -> String {
    let port = f.backends.port;
    let socket = f.haproxy.stats_socket();
    let body = format!(
        "global\n    master-worker\n    description autoproxy generation {generation}\n    \
         stats socket {} mode 660 level admin expose-fd listeners\n\
         resolvers vpc\n    nameserver ns1 {dns}\n    timeout resolve 1s\n\
         defaults\n    mode tcp\n    timeout connect 2s\n    timeout client 5s\n    timeout server 5s\n\
         frontend tls\n    bind {}\n    tcp-request inspect-delay 5s\n    \
         tcp-request content accept if {{ req.ssl_hello_type 1 }}\n    \
         use_backend be_one if {{ req.ssl_sni -i proxy.api.{zone} }}\n\
         backend be_one\n    server {host} {host}:{port} resolvers vpc init-addr none resolve-prefer ipv4\n",
        socket.display(),
        f.haproxy.https,
    );
    format!(
        "# autoproxy: generated\n# generation: {generation}\n# sha256: {}\n\
         # generated-at: 2026-01-01T00:00:00Z\n# trigger: test\n# rules: 1\n{body}",
        artifact::sha256_hex(body.as_bytes())
    )
}

#[test]
fn the_first_config_with_an_address_map_starts_from_what_haproxy_had_resolved() {
    let f = Fixture::new(&["a"]);
    let dns = DnsServer::start("127.0.0.1:0".parse().unwrap()).unwrap();
    let a = f.backends.get("a").addr;
    let std::net::IpAddr::V4(ip) = a.ip() else {
        panic!("backends listen on IPv4 loopback")
    };
    dns.set("api.up.test", &[ip]);
    f.install_first(&per_route_config(
        &f,
        1,
        "up.test",
        "api.up.test",
        dns.addr(),
    ));
    // HAProxy resolves the server's name at run time; wait until it routes.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while f.haproxy.probe("proxy.api.up.test").ok().as_deref() != Some("backend a") {
        assert!(std::time::Instant::now() < deadline, "{}", f.haproxy.log());
        std::thread::sleep(Duration::from_millis(100));
    }

    // The new layout names the same host; no autoproxy-resolver runs here, so only the
    // seeded address can route it.
    let mut route = proxy::api_route("up.test", f.backends.get("a"));
    route.back = autoproxy::names::HostName::parse("api.up.test").unwrap();
    let text = proxy::render(2, &[route], &f.haproxy.options(f.backends.port));
    let run = f.apply(&f.upload(&text));
    assert!(run.success(), "{run}");
    assert!(
        run.step("maps").iter().any(|l| l.contains("started")
            && l.contains("with 1 addresses the running HAProxy had resolved")),
        "{run}"
    );
    let map = std::fs::read_to_string(f.haproxy.dir().join("autoproxy/addresses.map")).unwrap();
    assert_eq!(map, format!("api.up.test {ip}\n"));
    f.assert_routes("up.test", "a");
}

#[test]
fn every_apply_leaves_a_fleet_record_of_what_runs() {
    let f = Fixture::new(&["a", "b"]);
    let first = f.config(1, &[("g1.test", "a")]);
    let version = f.upload(&first);
    let (run, record) = f.apply_and_record(&version);
    assert!(run.success(), "{run}");
    let header = artifact::parse_header(&first).unwrap();
    assert_eq!(record["instance_id"], INSTANCE);
    assert_eq!(record["generation"], 1);
    assert_eq!(record["sha256"], header.sha256.as_str());
    assert_eq!(record["result"], "applied");
    assert_eq!(record["reason"], "");
    assert_eq!(record["version_id"], version.as_str());
    assert!(
        record["at"].as_str().is_some_and(|at| at.ends_with('Z')),
        "{record}"
    );
    // The same record stays on the instance, for the address service's /agent/metrics.
    let local = f.haproxy.dir().join("autoproxy/last-apply.json");
    let local: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&local).unwrap()).unwrap();
    assert_eq!(local, record);

    let (run, record) = f.apply_and_record(&version);
    assert!(run.success(), "{run}");
    assert_eq!(record["result"], "skipped");
    assert_eq!(record["generation"], 1);

    // Rejected by `haproxy -c`: the record says so, and that generation 1 still runs.
    let second = f.config(2, &[("g2.test", "b")]);
    let body = artifact::body(&second).replace("defaults\n", "defaults\n    no-such-keyword on\n");
    let broken = restamp(&second, &body);
    let (run, record) = f.apply_and_record(&f.upload(&broken));
    assert_eq!(run.status, Some(1), "{run}");
    assert_eq!(record["result"], "rejected");
    assert_eq!(record["generation"], 1);
    assert!(
        record["reason"]
            .as_str()
            .is_some_and(|r| r.contains("haproxy -c rejected generation 2")),
        "{record}"
    );

    // A config that cannot start: rolled back, generation 1 runs again.
    let squatter = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut options = f.haproxy.options(f.backends.port);
    options.http_bind = squatter.local_addr().unwrap().to_string();
    let third = f.config_with(3, &[("g3.test", "a")], &options);
    let (run, record) = f.apply_and_record(&f.upload(&third));
    assert_eq!(run.status, Some(2), "{run}");
    assert_eq!(record["result"], "rolled_back");
    assert_eq!(record["generation"], 1);
    drop(squatter);
}
