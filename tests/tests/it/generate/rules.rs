//! Rule tables against moto: alias records as external-dns and load balancers write them, and
//! an operator's EKS rule whose endpoint name two zones claim.

use super::*;

/// The EKS recipe's rule (docs/DEPLOY.md, "Routing rules: EKS, external-dns, kubeadm").
pub(super) const EKS_RULE: &str = r#"[{"id": "eks", "front": "proxy.eks", "back": "eks", "back_types": ["CNAME"], "sni": "back-target"}]"#;
/// An EKS endpoint's name as AWS prints it.
pub(super) const ENDPOINT: &str = "ABC123DEF456.gr7.us-east-1.eks.amazonaws.com";

#[tokio::test]
async fn alias_a_records_route_the_api_and_the_ingress() {
    let estate = Estate::start().await;
    let zone = "alias.example.internal";
    estate
        .own
        .seed_zone(ZoneSpec::private(
            zone,
            vec![
                Record::alias(
                    format!("api.{zone}"),
                    "nlb-0123.elb.us-east-1.amazonaws.com.",
                ),
                Record::cname(format!("proxy.api.{zone}"), PROXY),
                // external-dns's default: the ingress as an alias A to its load balancer.
                Record::alias(
                    format!("ingress-int.{zone}"),
                    "internal-k8s-ingress-0123.us-east-1.elb.amazonaws.com.",
                ),
                Record::cname(format!("*.int.{zone}"), PROXY),
            ],
        ))
        .await
        .unwrap();
    let deps = estate.deps(&[]).await;
    let summary = run(&deps, &json!({}), AT).await;
    assert!(summary.published, "{summary:#?}");
    let config = estate.artifact().await.text;
    assert_eq!(snis(&config), [api_sni(zone), ingress_sni(zone)]);
    assert!(config.contains(&format!(" ingress-int.{zone}:443 ingress-int ")));
}

/// `eks.<zone>` CNAME → the endpoint, `proxy.eks.<zone>` CNAME → the proxy.
pub(super) fn eks_zone(zone: &str) -> ZoneSpec {
    ZoneSpec::private(
        zone,
        vec![
            Record::cname(format!("eks.{zone}"), format!("{ENDPOINT}.")),
            Record::cname(format!("proxy.eks.{zone}"), PROXY),
        ],
    )
}

#[tokio::test]
async fn a_second_claim_on_an_eks_endpoint_name_is_refused_and_the_holder_keeps_routing() {
    let estate = Estate::start().await;
    let endpoint = ENDPOINT.to_ascii_lowercase();
    let holder = estate
        .own
        .seed_zone(eks_zone("prod.example.internal"))
        .await
        .unwrap();
    let deps = estate.deps(&[("ROUTING_RULES", EKS_RULE)]).await;
    let first = run(&deps, &json!({}), AT).await;
    assert!(first.published && first.warnings.is_empty(), "{first:#?}");
    let route = format!("#@route {endpoint} eks.prod.example.internal:443 eks {OWN_ACCOUNT} ");
    assert!(estate.artifact().await.text.contains(&route));

    // Another account, another zone, the same endpoint behind its own record.
    let newcomer = estate
        .a
        .seed_zone(eks_zone("stolen.example.internal"))
        .await
        .unwrap();
    let second = run(&deps, &json!({}), LATER).await;
    assert!(!second.changed, "{second:#?}");
    assert_warning(
        &second,
        &[
            &format!(
                "SNI {endpoint} (outside every zone) is held by zone {}",
                holder.id
            ),
            &format!("zone {} in account {MEMBER_A} claims it too", newcomer.id),
        ],
    );
    let config = estate.artifact().await.text;
    assert!(config.contains(&route), "{config}");
    assert!(!config.contains("stolen"), "{config}");
    // explain says who holds it and why the other is refused.
    let answer = handle_explain(&deps, &endpoint).await;
    assert_eq!(answer["routed"], json!(true));
    assert_eq!(answer["account"], json!(OWN_ACCOUNT));
    let why = answer["why"].to_string();
    assert!(why.contains("is held by zone"), "{why}");
}

async fn handle_explain(deps: &Deps, name: &str) -> Value {
    let answer = autoproxy_generate::explain::explain(
        deps,
        &autoproxy::names::HostName::parse(name).unwrap(),
    )
    .await
    .unwrap();
    serde_json::to_value(answer).unwrap()
}
