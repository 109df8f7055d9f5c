//! Where a member's back may point, for the literal addresses of A backs: into its own
//! account's networks, never another member's nor the internet (docs/ARCHITECTURE.md,
//! "Where a back may point"). The members' networks come from `MEMBER_NETWORKS`, or from
//! their VPCs in moto. No address is ever connected to: the generator only reads them.

use std::collections::BTreeSet;

use autoproxy::discovery::Scope;
use autoproxy::manifest::Manifest;
use autoproxy::names::HostName;
use autoproxy::settings::MemberRegions;
use autoproxy_generate::ec2::Ec2;
use autoproxy_generate::explain;
use autoproxy_generate::vpcs::{Learned, VpcReader};
use aws_sdk_route53::config::SharedHttpClient;
use aws_sdk_route53::config::{Credentials, SharedCredentialsProvider};
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::body::SdkBody;
use aws_smithy_xml::decode::XmlDecodeError;

use super::*;

/// A's VPC and B's, as the operator gives them.
const NETWORKS: &str = "111111111111:10.1.0.0/16,222222222222:10.2.0.0/16";

/// The API pair of `zone` with its back at `address`.
fn api_at(zone: &str, address: &str) -> Vec<Record> {
    vec![
        Record::a(format!("api.{zone}"), address),
        Record::cname(format!("proxy.api.{zone}"), PROXY),
    ]
}

#[tokio::test]
async fn a_members_literal_back_routes_only_into_its_own_network() {
    let estate = Estate::start().await;
    // A's back in its own VPC; at an address of B's VPC; at a public address.
    for (zone, address) in [
        ("own.a.internal", "10.1.0.5"),
        ("into-b.a.internal", "10.2.0.9"),
        ("out.a.internal", "52.94.76.10"),
    ] {
        estate
            .a
            .seed_zone(ZoneSpec::private(zone, api_at(zone, address)))
            .await
            .unwrap();
    }
    let deps = estate.deps(&[("MEMBER_NETWORKS", NETWORKS)]).await;
    let summary = run(&deps, &json!({"dry_run": true}), AT).await;
    let config = summary.config.as_deref().unwrap();
    assert_eq!(summary.rules, 1, "{:#?}", summary.warnings);
    assert!(config.contains("proxy.api.own.a.internal"), "{config}");
    for absent in ["proxy.api.into-b.a.internal", "proxy.api.out.a.internal"] {
        assert!(!config.contains(absent), "{absent} routed:\n{config}");
    }
    // Each refusal names the route (zone and back record), the address and whose network.
    for expected in [
        "back record api.into-b.a.internal is an A record at 10.2.0.9, inside account \
         222222222222's network 10.2.0.0/16, another member's",
        "back record api.out.a.internal is an A record at 52.94.76.10, a globally routable \
         address, the internet: public backs are not allowed (ALLOW_PUBLIC_BACKS)",
    ] {
        assert!(
            summary.warnings.iter().any(|w| w.contains(expected)),
            "no warning says {expected:?}: {:#?}",
            summary.warnings
        );
    }
    // `explain` says why, once a run has published.
    assert!(run(&deps, &json!({}), AT).await.published);
    let answer = explain::explain(
        &deps,
        &HostName::parse("proxy.api.into-b.a.internal").unwrap(),
    )
    .await
    .unwrap();
    assert!(!answer.routed, "{answer:#?}");
    assert!(
        answer.why.iter().any(|step| step.contains(
            "api.into-b.a.internal is an A record at 10.2.0.9, inside account 222222222222's \
             network 10.2.0.0/16"
        )),
        "{:#?}",
        answer.why
    );

    // The operator may let backs reach the internet; B's network stays B's.
    let allowing = estate
        .deps(&[
            ("MEMBER_NETWORKS", NETWORKS),
            ("ALLOW_PUBLIC_BACKS", "true"),
        ])
        .await;
    let summary = run(&allowing, &json!({"dry_run": true}), AT).await;
    let config = summary.config.as_deref().unwrap();
    assert_eq!(summary.rules, 2, "{:#?}", summary.warnings);
    assert!(config.contains("proxy.api.out.a.internal"), "{config}");
    assert!(!config.contains("proxy.api.into-b.a.internal"), "{config}");
}

/// A VPC of `cidr` in `account`, with `more` IPv4 blocks associated: made with the account's
/// own credentials, so moto keeps it in that account, as AWS does.
async fn vpc(account: &Account, cidr: &str, more: &[&str]) {
    let region = account.sdk.region().map_or("us-east-1", |r| r.as_ref());
    let ec2 = Ec2::new(&account.sdk, region, None);
    let id = ec2
        .call("CreateVpc", &[("CidrBlock", cidr)], vpc_id)
        .await
        .unwrap();
    for block in more {
        ec2.call(
            "AssociateVpcCidrBlock",
            &[("VpcId", id.as_str()), ("CidrBlock", block)],
            |_| Ok(()),
        )
        .await
        .unwrap();
    }
}

/// The `vpcId` of a `CreateVpcResponse`.
fn vpc_id(body: &str) -> Result<String, XmlDecodeError> {
    body.split_once("<vpcId>")
        .and_then(|(_, rest)| rest.split_once("</vpcId>"))
        .map(|(id, _)| id.to_owned())
        .ok_or_else(|| XmlDecodeError::custom(format!("no vpcId in {body}")))
}

#[tokio::test]
async fn a_members_vpcs_are_its_networks_without_member_networks() {
    let estate = Estate::start().await;
    // A's VPC; B's, with a second block. No MEMBER_NETWORKS: the generator reads them.
    vpc(&estate.a, "10.1.0.0/16", &[]).await;
    vpc(&estate.b, "10.2.0.0/16", &["10.3.0.0/16"]).await;
    for (zone, address) in [
        ("own.a.internal", "10.1.0.5"),
        ("into-b.a.internal", "10.2.0.9"),
        ("into-b2.a.internal", "10.3.0.7"),
    ] {
        estate
            .a
            .seed_zone(ZoneSpec::private(zone, api_at(zone, address)))
            .await
            .unwrap();
    }
    let deps = estate.deps(&[]).await;
    let scheduled = run(&deps, &event("schedule.json", OWN_ACCOUNT, ""), AT).await;
    let config = estate.artifact().await.text;
    assert!(config.contains("proxy.api.own.a.internal"), "{config}");
    for absent in [
        "proxy.api.into-b.a.internal",
        "proxy.api.into-b2.a.internal",
    ] {
        assert!(!config.contains(absent), "{absent} routed:\n{config}");
    }
    assert_eq!(scheduled.rules, 1, "{:#?}", scheduled.warnings);
    for expected in [
        "api.into-b.a.internal is an A record at 10.2.0.9, inside account 222222222222's \
         network 10.2.0.0/16, another member's",
        "api.into-b2.a.internal is an A record at 10.3.0.7, inside account 222222222222's \
         network 10.3.0.0/16, another member's",
    ] {
        assert!(
            scheduled.warnings.iter().any(|w| w.contains(expected)),
            "no warning says {expected:?}: {:#?}",
            scheduled.warnings
        );
    }
    // One DescribeVpcs per member and region (A and B, us-east-1), in the run's metric.
    assert_eq!(deps.vpcs.calls(), 2);
    assert_eq!(scheduled.metrics[0]["Ec2Calls"].as_f64(), Some(2.0));

    // An event run judges with the networks the manifest keeps, calling EC2 not once.
    let later = "later.a.internal";
    let zone = estate
        .a
        .seed_zone(ZoneSpec::private(later, api_at(later, "10.2.0.10")))
        .await
        .unwrap();
    let one = run(
        &deps,
        &event("create-hosted-zone.json", MEMBER_A, &zone.id),
        LATER,
    )
    .await;
    assert_eq!(deps.vpcs.calls(), 2);
    assert_eq!(one.metrics[0]["Ec2Calls"].as_f64(), Some(0.0));
    assert_eq!(one.zones_scanned, 1, "{one:#?}");
    assert!(
        !estate
            .artifact()
            .await
            .text
            .contains("proxy.api.later.a.internal"),
        "{one:#?}"
    );
    let answer = explain::explain(
        &deps,
        &HostName::parse("proxy.api.later.a.internal").unwrap(),
    )
    .await
    .unwrap();
    assert!(
        answer.why.iter().any(|step| step.contains(
            "api.later.a.internal is an A record at 10.2.0.10, inside account 222222222222's \
             network 10.2.0.0/16"
        )),
        "{:#?}",
        answer.why
    );
}

/// A VPC of `cidr` in `account`, in `region`.
async fn vpc_in(account: &Account, region: &str, cidr: &str) {
    Ec2::new(&account.sdk, region, None)
        .call("CreateVpc", &[("CidrBlock", cidr)], vpc_id)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_members_vpc_in_a_region_without_proxies_is_its_network_by_default() {
    let estate = Estate::start().await;
    // B's VPC in eu-west-1, where no proxy is: peered, or behind a transit gateway, the
    // proxies reach it all the same. A's back points into it.
    vpc_in(&estate.b, "eu-west-1", "10.7.0.0/16").await;
    // And a route of A's that stays: the guard holds an account whose routes drop to none.
    for (zone, address) in [
        ("abroad.a.internal", "10.7.0.9"),
        ("home.a.internal", "10.99.0.5"),
    ] {
        estate
            .a
            .seed_zone(ZoneSpec::private(zone, api_at(zone, address)))
            .await
            .unwrap();
    }
    let schedule = event("schedule.json", OWN_ACCOUNT, "");

    // Read in the proxies' region alone, that VPC is nobody's network: the back routes.
    let narrow = estate.deps(&[]).await;
    run(&narrow, &schedule, AT).await;
    assert!(
        estate
            .artifact()
            .await
            .text
            .contains("proxy.api.abroad.a.internal"),
        "read in us-east-1 alone, B's VPC in eu-west-1 is unknown"
    );

    // By default each member's enabled regions are listed and read: B's VPC is B's.
    // (One route of two going: a drop the guard allows here.)
    let deps = estate
        .deps(&[
            ("MEMBER_REGIONS", "enabled"),
            ("MAX_RULE_DROP_PERCENT", "100"),
        ])
        .await;
    let scheduled = run(&deps, &schedule, LATER).await;
    let config = estate.artifact().await.text;
    assert!(
        !config.contains("proxy.api.abroad.a.internal"),
        "routed; EC2 calls {}, warnings {:#?}",
        deps.vpcs.calls(),
        scheduled.warnings
    );
    let expected = "api.abroad.a.internal is an A record at 10.7.0.9, inside account \
                    222222222222's network 10.7.0.0/16, another member's";
    assert!(
        scheduled.warnings.iter().any(|w| w.contains(expected)),
        "no warning says {expected:?}: {:#?}",
        scheduled.warnings
    );
    // One DescribeRegions per member, then one DescribeVpcs per member and region.
    let regions = Ec2::new(&estate.b.sdk, "us-east-1", None)
        .regions()
        .await
        .unwrap()
        .len() as u64;
    assert!(regions > 1, "moto lists {regions} region(s)");
    assert_eq!(deps.vpcs.calls(), 2 * (1 + regions));
    assert_eq!(
        scheduled.metrics[0]["Ec2Calls"].as_f64(),
        Some((2 * (1 + regions)) as f64)
    );
}

/// An SDK in us-east-1, without retries, whose every call `client` answers.
pub(super) fn sdk_answered_by(client: SharedHttpClient) -> SdkConfig {
    SdkConfig::builder()
        .behavior_version(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
            "AKIDTEST", "secret", None, None, "test",
        )))
        .retry_config(aws_config::retry::RetryConfig::disabled())
        .http_client(client)
        .build()
}

/// The networks `learned` gives `account`, as text, in order.
pub(super) fn ranges_of(learned: &Learned, account: &str) -> Vec<String> {
    learned.networks.ranges()[account]
        .iter()
        .map(ToString::to_string)
        .collect()
}

/// A manifest that knows `range` as member A's network.
fn knowing(range: &str) -> Manifest {
    let mut previous = Manifest::default();
    previous.networks.insert(MEMBER_A, range.parse().unwrap());
    previous
}

/// An SDK whose every call EC2 answers with `status` and `code`, as EC2's query protocol
/// writes an error: moto grants every call, so a member role without the grant, or EC2
/// failing, is answered here, through the SDK's own stack (signing, retries, error parsing).
fn ec2_answering(status: u16, code: &'static str) -> SdkConfig {
    let client = aws_smithy_http_client::test_util::infallible_client_fn(move |_request| {
        let body = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response><Errors><Error><Code>{code}\
             </Code><Message>not this time</Message></Error></Errors><RequestID>r-1\
             </RequestID></Response>"
        );
        http::Response::builder().status(status).body(body).unwrap()
    });
    sdk_answered_by(client)
}

/// An SDK whose EC2 refuses `DescribeRegions` (a member stack from before that grant) and
/// answers `DescribeVpcs` with one VPC of 10.5.0.0/16, as EC2's query protocol writes both.
fn ec2_without_the_regions_grant() -> SdkConfig {
    let client = aws_smithy_http_client::test_util::infallible_client_fn(|request| {
        let form = String::from_utf8_lossy(request.body().bytes().unwrap_or_default()).into_owned();
        let (status, body) = if form.contains("Action=DescribeRegions") {
            (
                403,
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response><Errors><Error><Code>\
                 UnauthorizedOperation</Code><Message>not granted</Message></Error></Errors>\
                 <RequestID>r-1</RequestID></Response>",
            )
        } else {
            (
                200,
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?><DescribeVpcsResponse \
                 xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\"><requestId>r-2</requestId>\
                 <vpcSet><item><vpcId>vpc-0a1b2c3d</vpcId><cidrBlock>10.5.0.0/16</cidrBlock>\
                 </item></vpcSet></DescribeVpcsResponse>",
            )
        };
        http::Response::builder().status(status).body(body).unwrap()
    });
    sdk_answered_by(client)
}

#[tokio::test]
async fn a_member_whose_regions_cannot_be_listed_keeps_its_other_regions_networks() {
    // Read before in eu-west-1 (10.7.0.0/16), where no proxy is.
    let previous = knowing("10.7.0.0/16");
    let sdk = ec2_without_the_regions_grant();
    let account = AccountRoute53::new(MEMBER_A, &aws_sdk_route53::Config::from(&sdk), 5.0);
    let reader = VpcReader::new(&sdk, vec!["us-east-1".into()], MemberRegions::Enabled, None);
    let learned = reader
        .learn(&Scope::Full, Some(&previous), &[account], None)
        .await;
    assert_eq!(
        learned.calls, 2,
        "DescribeRegions, then DescribeVpcs in us-east-1"
    );
    assert_eq!(
        ranges_of(&learned, MEMBER_A),
        ["10.5.0.0/16", "10.7.0.0/16"],
        "{:#?}",
        learned.warnings
    );
    assert_eq!(learned.warnings.len(), 1, "{:#?}", learned.warnings);
    let warning = &learned.warnings[0];
    for expected in [
        "DescribeRegions failed (UnauthorizedOperation",
        "its VPCs were read in the proxies' regions alone (us-east-1), and the networks last \
         read of it elsewhere are kept",
        "lacks the ec2:DescribeRegions grant",
    ] {
        assert!(warning.contains(expected), "{expected:?} in {warning}");
    }
}

#[tokio::test]
async fn a_member_whose_vpcs_cannot_be_read_keeps_its_last_networks_and_says_why() {
    let previous = knowing("10.1.0.0/16");
    for (status, code, expected) in [
        (
            403,
            "UnauthorizedOperation",
            format!(
                "account {MEMBER_A}: DescribeVpcs in us-east-1 was refused (UnauthorizedOperation: \
                 not this time): the member role lacks the ec2:DescribeVpcs grant of \
                 docs/member-account.yaml"
            ),
        ),
        (
            503,
            "Unavailable",
            format!("account {MEMBER_A}: DescribeVpcs in us-east-1 failed ("),
        ),
    ] {
        let sdk = ec2_answering(status, code);
        let account = AccountRoute53::new(MEMBER_A, &aws_sdk_route53::Config::from(&sdk), 5.0);
        // The proxies' two regions alone (MEMBER_REGIONS lists none besides).
        let reader = VpcReader::new(
            &sdk,
            vec!["us-east-1".into(), "eu-west-1".into()],
            MemberRegions::Listed(Vec::new()),
            None,
        );
        let learned = reader
            .learn(
                &Scope::Full,
                Some(&previous),
                std::slice::from_ref(&account),
                None,
            )
            .await;
        // Both regions are asked at once; the first region's answer decides.
        assert_eq!(learned.calls, 2, "{code}");
        assert_eq!(learned.networks, previous.networks, "{code}");
        assert_eq!(learned.warnings.len(), 1, "{code}: {:#?}", learned.warnings);
        let warning = &learned.warnings[0];
        assert!(warning.contains(&expected), "{code}: {warning}");
        assert!(
            warning.contains("its backs are judged with the 1 network(s) last read"),
            "{code}: {warning}"
        );

        // By default the member's enabled regions are listed first: that listing fails too,
        // so the proxies' regions are read alone, and the warning says so.
        listing_fails_too(&sdk, account, &previous, status, code).await;
    }
}

/// [`a_member_whose_vpcs_cannot_be_read_keeps_its_last_networks_and_says_why`] with the
/// member's regions listed first, as by default: with EC2 answering `status` and `code` to
/// every call.
async fn listing_fails_too(
    sdk: &SdkConfig,
    account: AccountRoute53,
    previous: &Manifest,
    status: u16,
    code: &str,
) {
    let reader = VpcReader::new(
        sdk,
        vec!["us-east-1".into(), "eu-west-1".into()],
        MemberRegions::Enabled,
        None,
    );
    let learned = reader
        .learn(&Scope::Full, Some(previous), &[account], None)
        .await;
    assert_eq!(
        learned.calls, 3,
        "{code}: DescribeRegions, then DescribeVpcs twice"
    );
    assert_eq!(learned.networks, previous.networks, "{code}");
    let listing = format!("account {MEMBER_A}: DescribeRegions failed (");
    assert!(
        learned.warnings.iter().any(|w| w.starts_with(&listing)
            && w.contains(
                "its VPCs were read in the proxies' regions alone \
                           (us-east-1, eu-west-1)"
            )),
        "{code}: {:#?}",
        learned.warnings
    );
    let names_grant = learned
        .warnings
        .iter()
        .any(|w| w.contains("lacks the ec2:DescribeRegions grant"));
    assert_eq!(names_grant, status == 403, "{:#?}", learned.warnings);
}

/// An HTTP client under which EC2 never answers the caller whose access key is `.0`, and
/// answers every other caller's `DescribeVpcs` with one VPC of 10.6.0.0/16 at once.
#[derive(Debug, Clone)]
struct SilentFor(&'static str);

impl HttpConnector for SilentFor {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let silent = request
            .headers()
            .get("authorization")
            .is_some_and(|auth| auth.contains(self.0));
        HttpConnectorFuture::new(async move {
            if silent {
                std::future::pending::<()>().await;
            }
            let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><DescribeVpcsResponse \
                        xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\"><vpcSet><item>\
                        <vpcId>vpc-6</vpcId><cidrBlock>10.6.0.0/16</cidrBlock></item></vpcSet>\
                        </DescribeVpcsResponse>";
            Ok(HttpResponse::new(
                200.try_into().unwrap(),
                SdkBody::from(body),
            ))
        })
    }
}

impl HttpClient for SilentFor {
    fn http_connector(
        &self,
        _: &HttpConnectorSettings,
        _: &RuntimeComponents,
    ) -> SharedHttpConnector {
        SharedHttpConnector::new(self.clone())
    }
}

// The clock is tokio's paused one: it moves on only when every task waits, so the silent
// member's wait ends exactly at the VPC reads' share of the time, without waiting for it.
#[tokio::test(start_paused = true)]
async fn a_member_whose_ec2_is_silent_keeps_its_last_networks_when_the_vpc_reads_time_is_up() {
    let sdk = sdk_answered_by(SharedHttpClient::new(SilentFor("AKIDSILENT")));
    let member = |account: &str, key: &str| {
        let credentials = Credentials::new(key, "secret", None, None, "test");
        AccountRoute53::new(account, &aws_sdk_route53::Config::from(&sdk), 5.0)
            .with_credentials(SharedCredentialsProvider::new(credentials))
    };
    let accounts = [member(MEMBER_A, "AKIDSILENT"), member(MEMBER_B, "AKIDB")];
    let reader = VpcReader::new(
        &sdk,
        vec!["us-east-1".into()],
        MemberRegions::Listed(Vec::new()),
        None,
    );
    let start = tokio::time::Instant::now();
    let deadline = start + Duration::from_secs(600);
    let previous = knowing("10.1.0.0/16");
    // Unbounded, the silent member would hold the reads forever: the paused clock reaches
    // this guard's 900 s at once instead, and the test fails rather than hangs.
    let reading = reader.learn(&Scope::Full, Some(&previous), &accounts, Some(deadline));
    let learned = tokio::time::timeout(Duration::from_secs(900), reading)
        .await
        .expect("the VPC reads ended within their share of the time");
    // A quarter of the 600 s left before the reads' deadline; the zones get the rest.
    let took = start.elapsed();
    assert!(
        took >= Duration::from_secs(150) && took < Duration::from_secs(151),
        "{took:?}"
    );
    let ranges = learned.networks.ranges();
    assert_eq!(
        ranges[MEMBER_A],
        BTreeSet::from(["10.1.0.0/16".parse().unwrap()])
    );
    assert_eq!(
        ranges[MEMBER_B],
        BTreeSet::from(["10.6.0.0/16".parse().unwrap()])
    );
    let expected = "account 111111111111: its VPCs were not all read within the 150 s this \
                    run gives the VPC reads (EC2 answered it slowly or not at all); its backs \
                    are judged with the 1 network(s) last read";
    assert!(
        learned.warnings.len() == 1 && learned.warnings[0].contains(expected),
        "{:#?}",
        learned.warnings
    );
}
