//! The data plane's parts of the stack: the stats listener's address is a parameter the
//! generator's renderer reads (and nothing else of the render options changes), and the
//! data-plane alarms are Metrics Insights queries over every instance's series of the names
//! the proxies publish.

use autoproxy::render::RenderOptions;
use autoproxy::settings::GenerateSettings;
use serde_json::json;
use serde_yaml::Value;

use super::stack::stack;
use super::template;

/// The CloudWatch names the proxies publish (namespace `autoproxy`, dimension `InstanceId`).
const PUBLISHED: [&str; 8] = [
    "HAProxyUp",
    "CurrentConnections",
    "ConnectionRate",
    "RejectedNoRoute",
    "RejectedNoAddress",
    "UnresolvedRoutes",
    "ResolverFailures",
    "Workers",
];

/// The render options a stack deploying `ProxyStatsBind` = `bind` gives the generator, read
/// the way the generator reads its environment.
fn render_options(template: &Value, bind: Option<&str>) -> RenderOptions {
    let mut stack = stack(template);
    if let Some(bind) = bind {
        stack.refs.insert("ProxyStatsBind".into(), json!(bind));
    }
    let variables =
        &template["Resources"]["GenerateFunction"]["Properties"]["Environment"]["Variables"];
    let raw = stack.resolve(&variables["RENDER_OPTIONS"]).unwrap();
    let raw = raw.as_str().unwrap().to_owned();
    let settings = GenerateSettings::from_lookup(|name| match name {
        "CONFIG_BUCKET" => Some("bucket".to_owned()),
        "PEERING_PROXY_HOSTNAME" => Some("proxy.example.com".to_owned()),
        "RENDER_OPTIONS" => Some(raw.clone()),
        _ => None,
    })
    .unwrap_or_else(|err| panic!("RENDER_OPTIONS {raw:?}: {err}"));
    settings.render_options
}

#[test]
fn the_stats_listener_address_is_a_parameter_the_renderer_reads() {
    let template = template();
    let parameter = &template["Parameters"]["ProxyStatsBind"];
    assert_eq!(
        parameter["Default"].as_str(),
        Some(RenderOptions::default().stats_bind.as_str()),
        "loopback by default, as the renderer's own default"
    );
    let deployed = render_options(&template, None);
    assert_eq!(
        RenderOptions {
            route_maxconn: None,
            ..deployed
        },
        RenderOptions::default(),
        "the renderer's defaults but the route's share, which the stack sets"
    );
    let open = render_options(&template, Some(":8404"));
    assert_eq!(open.stats_bind, ":8404");
    assert_eq!(
        RenderOptions {
            stats_bind: RenderOptions::default().stats_bind,
            route_maxconn: None,
            ..open
        },
        RenderOptions::default(),
        "only the stats listener's address changes"
    );
    let mut stack = stack(&template);
    stack
        .refs
        .insert("ProxyPrometheusExporter".into(), json!("false"));
    let variables =
        &template["Resources"]["GenerateFunction"]["Properties"]["Environment"]["Variables"];
    let raw = stack.resolve(&variables["RENDER_OPTIONS"]).unwrap();
    let without: RenderOptions = serde_json::from_str(raw.as_str().unwrap()).unwrap();
    assert!(!without.prometheus_exporter, "{raw}");

    let pattern = parameter["AllowedPattern"].as_str().unwrap();
    let matcher = regex_automata::dfa::regex::Regex::new(&format!("^(?:{pattern})$")).unwrap();
    for good in ["127.0.0.1:8404", ":8404", "10.1.2.3:9000"] {
        assert!(
            matcher.is_match(good.as_bytes()),
            "{good} refused by {pattern}"
        );
    }
    for bad in [
        "127.0.0.1:8404 ssl",
        "8404",
        "host:8404",
        "[::]:8404",
        "1.2.3.4:80\"",
        "",
    ] {
        assert!(
            !matcher.is_match(bad.as_bytes()),
            "{bad} admitted by {pattern}"
        );
    }
}

/// `ProxyRouteMaxConn` reaches the renderer, and its default is the renderer's own share (a
/// tenth of the production `maxconn`, which bounds it).
#[test]
fn the_share_of_a_route_is_a_parameter_the_renderer_reads() {
    let template = template();
    let parameter = &template["Parameters"]["ProxyRouteMaxConn"];
    let defaults = RenderOptions::default();
    assert_eq!(
        parameter["Default"].as_u64(),
        Some(u64::from(defaults.route_share()))
    );
    assert_eq!(
        parameter["MaxValue"].as_u64(),
        Some(u64::from(defaults.maxconn))
    );
    assert_eq!(
        render_options(&template, None).route_maxconn,
        Some(defaults.route_share())
    );
    let mut stack = stack(&template);
    stack.refs.insert("ProxyRouteMaxConn".into(), json!(500));
    let variables =
        &template["Resources"]["GenerateFunction"]["Properties"]["Environment"]["Variables"];
    let raw = stack.resolve(&variables["RENDER_OPTIONS"]).unwrap();
    let options: RenderOptions = serde_json::from_str(raw.as_str().unwrap()).unwrap();
    assert_eq!(options.route_maxconn, Some(500), "{raw}");
}

#[test]
fn the_data_plane_alarms_query_every_instance_for_published_names() {
    let template = template();
    let resources = template["Resources"].as_mapping().unwrap();
    let mut queried = Vec::new();
    for name in [
        "HAProxyDownAlarm",
        "RejectedNoAddressAlarm",
        "UnresolvedRoutesAlarm",
        "WorkersPilingUpAlarm",
    ] {
        let alarm = &template["Resources"][name]["Properties"];
        assert!(resources.contains_key(name), "no {name}");
        let metrics = alarm["Metrics"].as_sequence().unwrap();
        assert_eq!(metrics.len(), 1, "{name}: one query");
        let query = metrics[0]["Expression"].as_str().unwrap();
        let metric = query
            .strip_prefix("SELECT ")
            .and_then(|rest| rest.split_once('('))
            .and_then(|(_, rest)| rest.split_once(')'))
            .map(|(metric, _)| metric)
            .unwrap_or_else(|| panic!("{name}: {query}"));
        assert!(
            PUBLISHED.contains(&metric),
            "{name}: {metric} is not published"
        );
        assert!(
            query.ends_with(r#" FROM SCHEMA("autoproxy", InstanceId)"#),
            "{name}: every instance's series of namespace autoproxy: {query}"
        );
        assert_eq!(metrics[0]["Period"].as_u64(), Some(60), "{name}");
        assert_eq!(alarm["TreatMissingData"].as_str(), Some("notBreaching"));
        queried.push(metric);
    }
    assert_eq!(
        queried,
        [
            "HAProxyUp",
            "RejectedNoAddress",
            "UnresolvedRoutes",
            "Workers"
        ]
    );
}
