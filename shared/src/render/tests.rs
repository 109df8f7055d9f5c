use super::*;

fn route(rule: &str, account: &str, zone_id: &str, zone: &str, sni_match: SniMatch) -> Route {
    let zone_name = HostName::parse(zone).unwrap();
    let (sni, back) = match sni_match {
        SniMatch::Exact => (format!("proxy.api.{zone}"), zone_name.with_prefix("api")),
        SniMatch::Suffix => (format!(".int.{zone}"), zone_name.with_prefix("ingress-int")),
    };
    Route {
        rule: rule.to_owned(),
        account: account.to_owned(),
        zone_id: zone_id.to_owned(),
        zone_name,
        sni,
        sni_match,
        back,
        port: 443,
        records: vec![],
    }
}

fn render_with(routes: &[Route], template: &str) -> Result<Rendered, RenderError> {
    render_options(routes, template, &RenderOptions::default())
}

fn render_options(
    routes: &[Route],
    template: &str,
    options: &RenderOptions,
) -> Result<Rendered, RenderError> {
    let resolvers = ["169.254.169.253:53".parse().unwrap()];
    Renderer::new(template)?.render(&RenderInput {
        routes,
        resolvers: &resolvers,
        proxies: &[],
        options,
        generation: 3,
        generated_at: "2026-01-01T00:00:00Z",
        trigger: "manual",
    })
}

/// The borders the generator judged by are the ones the agent reads back: the same
/// networks, the same public-backs choice; a config rendered without them has no line.
#[test]
fn the_borders_travel_in_the_body_and_read_back_as_they_were() {
    use crate::networks::{Networks, PublicBacks};
    let routes = [route(
        "api",
        "111111111111",
        "Z1",
        "a.internal",
        SniMatch::Exact,
    )];
    let resolvers = ["169.254.169.253:53".parse().unwrap()];
    let options = RenderOptions::default();
    let input = RenderInput {
        routes: &routes,
        resolvers: &resolvers,
        proxies: &[],
        options: &options,
        generation: 3,
        generated_at: "2026-01-01T00:00:00Z",
        trigger: "manual",
    };
    let mut networks = Networks::default();
    networks.insert("111111111111", "10.1.0.0/16".parse().unwrap());
    networks.insert("222222222222", "10.2.0.0/16".parse().unwrap());
    networks.insert("222222222222", "2600:1f18:2::/56".parse().unwrap());
    let renderer = Renderer::new(DEFAULT_TEMPLATE).unwrap();
    for public in [PublicBacks::Refused, PublicBacks::Allowed] {
        let borders = Borders::new(networks.clone(), public);
        let text = renderer.render_within(&input, &borders).unwrap().text;
        assert!(
            text.contains("\n#@network 222222222222 2600:1f18:2::/56\n"),
            "{text}"
        );
        let read = artifact::borders(&text);
        assert_eq!(read.networks(), &networks);
        assert_eq!(read.public(), public);
    }
    let plain = renderer.render(&input).unwrap().text;
    assert!(
        !plain.contains("#@network") && !plain.contains("#@public-backs"),
        "{plain}"
    );
}

#[test]
fn header_carries_the_values_and_the_body_hash() {
    let routes = [route("api", "1", "Z1", "a.internal", SniMatch::Exact)];
    let rendered = render_with(&routes, DEFAULT_TEMPLATE).unwrap();
    let header = artifact::parse_header(&rendered.text).unwrap();
    assert_eq!(header, rendered.header);
    assert_eq!(header.generation, 3);
    assert_eq!(header.rules, 1);
    assert!(
        rendered
            .text
            .contains("description autoproxy generation 3\n")
    );
}

#[test]
fn same_input_same_bytes() {
    let routes = [
        route("api", "1", "Z1", "a.internal", SniMatch::Exact),
        route("ingress-int", "1", "Z1", "a.internal", SniMatch::Suffix),
    ];
    let a = render_with(&routes, DEFAULT_TEMPLATE).unwrap();
    let b = render_with(&routes, DEFAULT_TEMPLATE).unwrap();
    assert_eq!(a.text, b.text);
}

#[test]
fn identifiers_depend_on_account_and_zone_id() {
    let a = route(
        "api",
        "111111111111",
        "ZA",
        "same.internal",
        SniMatch::Exact,
    );
    let b = route(
        "api",
        "222222222222",
        "ZB",
        "same.internal",
        SniMatch::Exact,
    );
    let views = route_views(std::slice::from_ref(&a), None);
    let other = route_views(std::slice::from_ref(&b), None);
    assert!(views[0].backend.starts_with("be_api_same.internal_"));
    assert_ne!(views[0].backend, other[0].backend);
    // Even unresolved duplicates get distinct names.
    let both = [a.clone(), a];
    let views = route_views(&both, None);
    assert_ne!(views[0].backend, views[1].backend);
}

#[test]
fn strict_undefined_fails_the_render() {
    let err = render_with(&[], "# generation: {{ header.generation }}\n{{ nope }}\n");
    assert!(matches!(err, Err(RenderError::Render(_))), "{err:?}");
}

#[test]
fn a_template_without_the_header_is_refused() {
    let err = render_with(&[], "global\n");
    assert!(matches!(err, Err(RenderError::Header(_))), "{err:?}");
}

#[test]
fn a_template_hashing_its_own_hash_is_refused() {
    let template = "# generation: {{ header.generation }}\n# sha256: {{ header.sha256 }}\n\
                    # generated-at: x\n# trigger: x\n# rules: 0\nglobal\n  # {{ header.sha256 }}\n";
    let err = render_with(&[], template);
    assert!(
        matches!(err, Err(RenderError::Render(_) | RenderError::Header(_))),
        "{err:?}"
    );
}

#[test]
fn the_fast_check_agrees_with_the_exact_one() {
    let exact = |text: &str| {
        text.chars()
            .find(|c| FORBIDDEN.contains(c) || c.is_control())
    };
    let samples = [
        "api.prod.example.internal",
        "be_api_prod.example.internal_282dc026",
        ":443",
        "",
        "a b",
        "a\tb",
        "a\u{7f}b",
        "a\u{85}b",
        "caf\u{e9}",
        "a#b",
        "a\"b",
        "a'b",
        "a$b",
        "a\\b",
        "a\0b",
        "a\rb",
    ];
    for text in samples {
        assert_eq!(forbidden_char(text), exact(text), "{text:?}");
    }
    assert_eq!(forbidden_char("x\u{85}"), Some('\u{85}'));
    assert_eq!(forbidden_char("api.example.internal"), None);
}

#[test]
fn the_default_template_forwards_readiness_to_the_agent_socket_it_is_given() {
    let routes = [route("api", "1", "Z1", "a.internal", SniMatch::Exact)];
    let rendered = render_with(&routes, DEFAULT_TEMPLATE).unwrap();
    let default = RenderOptions::default().agent_socket;
    assert!(
        rendered
            .text
            .contains(&format!("\n    server agent unix@{default}\n")),
        "{}",
        rendered.text
    );
    for bad in ["/run/a.sock\n    server x 10.0.0.1:80", "/run/a#b.sock"] {
        let options = RenderOptions {
            agent_socket: bad.to_owned(),
            ..RenderOptions::default()
        };
        let err = render_options(&routes, DEFAULT_TEMPLATE, &options);
        assert!(
            matches!(err, Err(RenderError::Render(_))),
            "{bad:?}: {err:?}"
        );
    }
}

#[test]
fn a_route_s_share_is_its_setting_or_a_tenth_of_maxconn() {
    let check = |maxconn: u32, route_maxconn: Option<u32>, share: u32| {
        let options = RenderOptions {
            maxconn,
            route_maxconn,
            ..RenderOptions::default()
        };
        assert_eq!(options.route_share(), share, "{maxconn} {route_maxconn:?}");
        let text = render_options(&[], DEFAULT_TEMPLATE, &options)
            .unwrap()
            .text;
        assert!(
            text.contains(&format!("{{ sc0_conn_cur gt {share} }}")),
            "{text}"
        );
        assert!(text.contains(&format!(" size {maxconn} ")), "{text}");
    };
    check(20_000, None, 2_000);
    check(300, None, 30);
    check(5, None, 1);
    check(300, Some(100), 100);
    check(300, Some(0), 1);
}

#[test]
fn values_that_could_inject_are_refused_by_the_formatter() {
    let template = "# generation: {{ header.generation }}\nglobal\n    log {{ bad }}\n";
    let env = Renderer::new(template).unwrap();
    let tpl = env.env.get_template(TEMPLATE_NAME).unwrap();
    for bad in ["a\nb", "a#b", "a\"b", "${X}"] {
        let err = tpl.render(
            minijinja::context! { header => minijinja::context!{ generation => 1 }, bad => bad },
        );
        assert!(
            err.unwrap_err().to_string().contains("refusing to write"),
            "{bad:?}"
        );
    }
}
