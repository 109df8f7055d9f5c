//! The EKS recipe end to end on a real HAProxy (docs/DEPLOY.md, "Routing rules: EKS,
//! external-dns, kubeadm"): an EKS-shaped zone in Route53 (moto), the operator's
//! `back-target` rule in `ROUTING_RULES`, the generator's published config on HAProxy, and
//! kubectl through the proxy with `tls-server-name` set to the endpoint's name, against an API
//! server whose certificate carries only that name, verified.

use std::net::Ipv4Addr;

use autoproxy::artifact::MapFiles;
use autoproxy::time::Stamp;
use autoproxy_generate::handler::Deps;
use autoproxy_tests::estate::{self, Account, Record, ZoneSpec, object_text, versioned_bucket};
use autoproxy_tests::generator::run_at;
use autoproxy_tests::kube::ApiServer;
use autoproxy_tests::moto::{Moto, OWN_ACCOUNT, free_port};
use autoproxy_tests::proxy::{Haproxy, HaproxyFiles};
use serde_json::json;

const BUCKET: &str = "autoproxy-config-eks";
const KEY: &str = "haproxy/haproxy.cfg";
const PROXY: &str = "peering-proxy.tools.example.com";
const ZONE: &str = "prod.example.internal";
/// The endpoint as the EKS console prints it; its certificate names it (lower-cased here).
const ENDPOINT: &str = "ABC123DEF456.gr7.us-east-1.eks.amazonaws.com";
/// Where `eks.<zone>` resolves in this harness (autoproxy-resolver's address map).
const API_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 62);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_reaches_an_eks_api_server_through_the_proxy_by_its_endpoint_name() {
    let endpoint = ENDPOINT.to_ascii_lowercase();
    let api = ApiServer::start(API_IP, free_port(), &endpoint).unwrap();

    // Route53: eks.Z CNAME → the endpoint; proxy.eks.Z CNAME → the proxy.
    let moto = Moto::start();
    let sdk = moto.sdk_config().await;
    versioned_bucket(&sdk, BUCKET).await.unwrap();
    Account::own(&sdk)
        .seed_zone(ZoneSpec::private(
            ZONE,
            vec![
                Record::cname(format!("eks.{ZONE}"), format!("{ENDPOINT}.")),
                Record::cname(format!("proxy.eks.{ZONE}"), PROXY),
            ],
        ))
        .await
        .unwrap();

    // The generator with the recipe's rule; the rule's port is the stand-in's (443 in EKS).
    let haproxy = Haproxy::new();
    let mut options = haproxy.options(0);
    options.backend_port = None;
    let rules = format!(
        r#"[{{"id": "eks", "front": "proxy.eks", "back": "eks", "back_types": ["CNAME"], "sni": "back-target", "port": {}}}]"#,
        api.addr.port()
    );
    let vars = [
        ("CONFIG_BUCKET", BUCKET.to_owned()),
        ("PEERING_PROXY_HOSTNAME", PROXY.to_owned()),
        ("ROUTING_RULES", rules),
        ("RENDER_OPTIONS", serde_json::to_string(&options).unwrap()),
        ("ROUTE53_REQUESTS_PER_SECOND", "1000".to_owned()),
    ];
    let settings = estate::generate_settings(&vars);
    let deps = Deps::new(settings, &sdk, OWN_ACCOUNT).await.unwrap();
    let summary = run_at(&deps, &json!({}), &Stamp::now().to_string(), None)
        .await
        .unwrap();
    assert!(summary.published, "{summary:#?}");
    let config = object_text(&aws_sdk_s3::Client::new(&sdk), BUCKET, KEY).await;
    let line = format!(
        "#@route {endpoint} eks.{ZONE}:{} eks {OWN_ACCOUNT} ",
        api.addr.port()
    );
    assert!(config.contains(&line), "{config}");

    // HAProxy serves it; the back record's address is what autoproxy-resolver would write.
    let addresses = haproxy.dir().join(MapFiles::stable().addresses);
    std::fs::create_dir_all(addresses.parent().unwrap()).unwrap();
    std::fs::write(&addresses, format!("eks.{ZONE} {API_IP}\n")).unwrap();
    haproxy.start(&config);
    let proxy = format!("https://{}", options.https_bind);

    // The certificate carries only the endpoint's name: the front's name cannot pass.
    let direct = format!("https://{}", api.addr);
    let refused = api.kubectl_raw(&direct, &format!("proxy.eks.{ZONE}"), "/version");
    assert!(
        refused.as_ref().is_err_and(|err| err.contains("x509")),
        "{refused:?}"
    );
    // Through the proxy, sending the endpoint's name as AWS prints it: verified and answered.
    let version = api
        .kubectl_raw(&proxy, ENDPOINT, "/version")
        .unwrap_or_else(|err| panic!("kubectl through the proxy: {err}\n{}", haproxy.log()));
    assert!(version.contains("v1.32.4"), "{version}");
    // The front's own name is not routed by this rule: the proxy closes the connection.
    let unrouted = api.kubectl_raw(&proxy, &format!("proxy.eks.{ZONE}"), "/version");
    assert!(unrouted.is_err(), "{unrouted:?}");
}
