//! The proxies' own VPC is a proxy VPC by itself: with `ProxyFleet=create` the stack knows it
//! (`ProxyVpcId`), and the generator's `PROXY_VPCS` carries it whether or not the operator
//! repeats it in `ProxyVpcs`, with the grant that lists its zones.

use autoproxy::settings::GenerateSettings;
use autoproxy_tests::cfn::Stack;
use autoproxy_tests::moto::REGION;
use serde_json::json;
use serde_yaml::Value;

use super::stack::statements_in;
use super::template;

const FLEET_VPC: &str = "vpc-0123456789abcdef0";
const OTHER_VPC: &str = "vpc-0fedcba9876543210";

/// The template deployed with these parameters (the rest at their defaults), every condition
/// decided from them as CloudFormation decides it.
fn deployed(template: &Value, parameters: &[(&str, serde_json::Value)]) -> Stack {
    let mut stack = super::stack::stack(template);
    // Decided below from the parameters, not preset.
    stack.conditions.remove("HasProxyVpcs");
    for (name, value) in parameters {
        assert!(stack.refs.contains_key(*name), "no parameter {name}");
        stack.refs.insert((*name).into(), value.clone());
    }
    stack
        .decide_conditions(template)
        .expect("the conditions decide");
    stack
}

/// The proxy VPCs the generator reads from the environment the template gives it, as
/// `region:vpc-id`, and whether its role may list their zones.
fn proxy_vpcs(template: &Value, stack: &Stack) -> (Vec<String>, bool) {
    let function = &template["Resources"]["GenerateFunction"]["Properties"];
    let raw = stack
        .resolve(&function["Environment"]["Variables"]["PROXY_VPCS"])
        .unwrap();
    let raw = raw.as_str().expect("PROXY_VPCS is a string").to_owned();
    let settings = GenerateSettings::from_lookup(|name| match name {
        "CONFIG_BUCKET" => Some("bucket".to_owned()),
        "PEERING_PROXY_HOSTNAME" => Some("proxy.tools.example.com".to_owned()),
        "PROXY_VPCS" => Some(raw.clone()),
        _ => None,
    })
    .unwrap_or_else(|err| panic!("PROXY_VPCS {raw:?}: {err}"));
    let vpcs = settings
        .proxy_vpcs
        .iter()
        .map(|vpc| format!("{}:{}", vpc.region, vpc.vpc_id))
        .collect();
    let listed = statements_in(template, "GenerateFunction", stack)
        .iter()
        .any(|s| s["Sid"] == "ListZonesOfProxyVpcs");
    (vpcs, listed)
}

fn fleet(extra: &str) -> Vec<(&'static str, serde_json::Value)> {
    vec![
        ("ProxyFleet", json!("create")),
        ("ProxyVpcId", json!(FLEET_VPC)),
        (
            "ProxySubnets",
            json!(["subnet-0aaaaaaaaaaaaaaaa", "subnet-0bbbbbbbbbbbbbbbb"]),
        ),
        ("ProxyClientCidrs", json!("10.0.0.0/8")),
        ("ProxyStatsBind", json!(":8404")),
        (
            "ProxyVpcs",
            json!(
                extra
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .collect::<Vec<_>>()
            ),
        ),
    ]
}

#[test]
fn a_created_fleet_makes_its_vpc_a_proxy_vpc_by_itself() {
    let template = template();
    let own = format!("{REGION}:{FLEET_VPC}");
    let other = format!("eu-west-1:{OTHER_VPC}");

    let alone = deployed(&template, &fleet(""));
    assert_eq!(
        proxy_vpcs(&template, &alone),
        (vec![own.clone()], true),
        "ProxyFleet=create with no ProxyVpcs: the fleet's VPC is the proxy VPC"
    );

    let with_extra = deployed(&template, &fleet(&other));
    assert_eq!(
        proxy_vpcs(&template, &with_extra),
        (vec![other.clone(), own.clone()], true),
        "ProxyVpcs adds to the fleet's VPC"
    );

    // Repeated by an operator who set it before: once.
    let repeated = deployed(&template, &fleet(&own));
    assert_eq!(proxy_vpcs(&template, &repeated), (vec![own.clone()], true));

    // No fleet created: exactly ProxyVpcs, and no listing grant without one.
    let none = deployed(&template, &[]);
    assert_eq!(proxy_vpcs(&template, &none), (vec![], false));
    let listed = deployed(&template, &[("ProxyVpcs", json!([other]))]);
    assert_eq!(proxy_vpcs(&template, &listed), (vec![other], true));
}

/// The first run watches exactly the generator's environment: the same value there.
#[test]
fn the_first_run_sees_the_same_proxy_vpcs() {
    let template = template();
    let stack = deployed(&template, &fleet(""));
    let function = &template["Resources"]["GenerateFunction"]["Properties"]["Environment"]["Variables"]
        ["PROXY_VPCS"];
    let first_run =
        &template["Resources"]["GenerateOnDeploy"]["Properties"]["Settings"]["PROXY_VPCS"];
    assert_eq!(
        stack.resolve(function).unwrap(),
        stack.resolve(first_run).unwrap()
    );
}
