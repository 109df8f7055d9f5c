use super::*;

fn config(body: &str, sum: &str) -> String {
    format!(
        "# autoproxy: generated\n# generation: 7\n# sha256: {sum}\n\
         # generated-at: 2026-01-01T00:00:00Z\n# trigger: schedule\n# rules: 2\n{body}"
    )
}

#[test]
fn round_trip() {
    let body = "global\n    master-worker\n# a comment in the body\n";
    let text = config(body, &sha256_hex(body.as_bytes()));
    assert_eq!(super::body(&text), body);
    let header = parse_header(&text).unwrap();
    assert_eq!(header.generation, 7);
    assert_eq!(header.rules, 2);
    assert_eq!(header.trigger, "schedule");
}

#[test]
fn sha256_matches_the_coreutils_value() {
    // printf abc | sha256sum
    assert_eq!(
        sha256_hex(b"abc"),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
}

#[test]
fn a_tampered_body_is_rejected() {
    let text = config("global\n", &sha256_hex(b"global\n")) + "    extra\n";
    assert!(matches!(
        parse_header(&text),
        Err(HeaderError::Mismatch { .. })
    ));
}

#[test]
fn missing_and_malformed_fields_are_named() {
    let err = parse_header("global\n").unwrap_err();
    assert_eq!(
        err,
        HeaderError::Missing {
            field: "generation"
        }
    );
    let text = config("global\n", "abc");
    assert!(err_mentions(&text, "64 lower-case hex"));
    for generation in [
        "x",
        "-1",
        "+7",
        "1000000000000000000",
        "18446744073709551616",
    ] {
        let text = format!("# generation: {generation}\n# sha256: 00\nglobal\n");
        assert!(err_mentions(&text, "at most 18 digits"), "{generation}");
    }
}

#[test]
fn generations_are_bounded_to_what_the_apply_document_reads() {
    assert_eq!(parse_generation("0"), Some(0));
    assert_eq!(parse_generation(" 1795403642 "), Some(1_795_403_642));
    assert_eq!(parse_generation("999999999999999999"), Some(MAX_GENERATION));
    for bad in [
        "",
        "1e3",
        "1000000000000000000",
        "18446744073709551615",
        "٣",
    ] {
        assert_eq!(parse_generation(bad), None, "{bad:?}");
    }
}

#[test]
fn route_tables_come_from_the_body_lines() {
    let body = "global\n#@route a.example x.example:443 api 1 Z1\n\
                #@suffix int.example y.example:443 ingress-int 1 Z1\n\
                #@nameserver 10.0.0.2:53\n#@route b.example Z.Example.:443\n";
    let text = config(body, &sha256_hex(body.as_bytes()));
    let (routes, suffixes) = MapFiles::route_tables(&text);
    // Targets as the address service names its hosts (`route_hosts`): one normaliser.
    assert_eq!(routes, "a.example x.example:443\nb.example z.example:443\n");
    assert_eq!(suffixes, "int.example y.example:443\n");
    assert_eq!(
        MapFiles::named_by(&text, 7).routes,
        "autoproxy/routes.map",
        "a config that names no per-generation map uses the stable layout"
    );
    let legacy_body = "global\n    x map_str(autoproxy/gen-7/routes.map)\n";
    let legacy = config(legacy_body, &sha256_hex(legacy_body.as_bytes()));
    assert_eq!(MapFiles::named_by(&legacy, 7), MapFiles::per_generation(7));
    assert_eq!(MapFiles::named_by(&legacy, 8), MapFiles::stable());
    assert_eq!(MapFiles::generation_table(42), "running 42\n");
}

#[test]
fn route_hosts_and_nameservers_come_from_the_body_lines() {
    let body = "global\n#@route a.example API.X.example.:443 api 1 Z1\n\
                #@suffix int.example y.example:443 ingress-int 1 Z1\n\
                #@route b.example api.x.example:8443\n#@route c.example 10.0.0.7:443\n\
                #@route broken\n#@nameserver 10.0.0.2:53\n#@nameserver [fd00::2]:53\n\
                #@nameserver 10.0.0.2:53\n#@nameserver resolver.example:53\n\
                #@nameserver 10.0.0.3\n";
    let text = config(body, &sha256_hex(body.as_bytes()));
    assert_eq!(
        route_hosts(&text),
        ["10.0.0.7", "api.x.example", "y.example"]
    );
    let found = nameservers(&text);
    assert_eq!(
        found.valid,
        [
            "10.0.0.2:53".parse().unwrap(),
            "[fd00::2]:53".parse().unwrap()
        ]
    );
    assert_eq!(found.ignored, ["resolver.example:53", "10.0.0.3"]);
    // Header lines never count, even when they look like body lines.
    assert!(route_hosts("# #@route a b:1\n").is_empty());
    assert_eq!(nameservers("").valid, []);
}

#[test]
fn borders_come_from_the_network_and_public_backs_lines() {
    let body = "global\n#@route a.example x.example:443 api 111111111111 Z1\n\
                #@network 111111111111 10.1.0.0/16\n#@network 222222222222 10.2.0.9/16\n\
                #@network 222222222222 2600:1f18:2::/56\n#@network broken\n\
                #@network 333333333333 not-a-range\n#@public-backs refuse\n";
    let text = config(body, &sha256_hex(body.as_bytes()));
    let read = borders(&text);
    assert_eq!(read.public(), PublicBacks::Refused);
    let ranges: Vec<String> = read
        .networks()
        .ranges()
        .iter()
        .flat_map(|(account, nets)| nets.iter().map(move |net| format!("{account} {net}")))
        .collect();
    assert_eq!(
        ranges,
        [
            "111111111111 10.1.0.0/16",
            "222222222222 10.2.0.0/16",
            "222222222222 2600:1f18:2::/56"
        ]
    );
    let judge = |address: &str, account: &str| {
        read.judge(address.parse().unwrap(), account)
            .map_err(|why| why.to_string())
    };
    assert!(judge("10.2.0.5", "111111111111").is_err());
    assert_eq!(judge("10.2.0.5", "222222222222"), Ok(()));
    assert!(judge("8.8.8.8", "111111111111").is_err());

    let allowed = "global\n#@public-backs allow\n";
    let allowed = borders(&config(allowed, &sha256_hex(allowed.as_bytes())));
    assert_eq!(allowed.public(), PublicBacks::Allowed);
    let odd = "global\n#@public-backs yes\n";
    let odd = borders(&config(odd, &sha256_hex(odd.as_bytes())));
    assert_eq!(
        odd.public(),
        PublicBacks::Refused,
        "anything but allow refuses"
    );
    // No line at all: an earlier generator's artifact, judged by the never-a-backend
    // ranges only.
    let earlier = borders("global\n#@route a.example x.example:443 api 1 Z1\n");
    assert_eq!(earlier.public(), PublicBacks::Allowed);
    assert!(earlier.networks().is_empty());
    assert!(
        borders("# #@public-backs refuse\nglobal\n")
            .networks()
            .is_empty()
    );
    assert_eq!(
        borders("# #@public-backs refuse\nglobal\n").public(),
        PublicBacks::Allowed,
        "header lines never count"
    );
}

fn err_mentions(text: &str, fragment: &str) -> bool {
    parse_header(text)
        .unwrap_err()
        .to_string()
        .contains(fragment)
}

#[test]
fn proxy_lines_name_the_proxy_and_route_lines_their_targets() {
    let body = "global\n#@proxy Peering-Proxy.Tools.Example.com.\n#@proxy nlb.example\n\
                #@proxy bad name\n#@route a.x h:443 api 1 Z\n#@suffix b.x 10.0.0.1:8443\n\
                #@route broken\n";
    let text = config(body, &sha256_hex(body.as_bytes()));
    let names: Vec<String> = proxy_names(&text).into_iter().collect();
    assert_eq!(names, ["nlb.example", "peering-proxy.tools.example.com"]);
    let targets: Vec<&str> = route_targets(&text).collect();
    assert_eq!(targets, ["h:443", "10.0.0.1:8443"]);
    // Header lines never count.
    assert!(proxy_names("# #@proxy a.example\n").is_empty());
}
