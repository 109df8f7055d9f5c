//! Member accounts from AWS Organizations, against moto: a unit's accounts listed at run time,
//! each account's state across runs (a role never created, one that breaks, a denying role, a
//! throttled account), and the mass-deletion guard held per account. Faults are injected by a
//! proxy in front of moto (`fault_proxy`): moto lets any role be assumed and never throttles.
#![allow(clippy::print_stdout)]

use std::collections::BTreeMap;
use std::net::SocketAddr;

use autoproxy::settings::GenerateSettings;
use autoproxy_generate::handler::{Deps, Summary};
use autoproxy_tests::check::assert_valid;
use autoproxy_tests::config_bucket::ConfigBucket;
use autoproxy_tests::estate::{Account, READER_ROLE, ZoneSpec, api_pair};
use autoproxy_tests::fault_proxy::{Fault, FaultProxy};
use autoproxy_tests::generator::run_at;
use autoproxy_tests::moto::{Moto, OWN_ACCOUNT};
use autoproxy_tests::organization::Organization;
use aws_config::SdkConfig;
use futures_util::{StreamExt, TryStreamExt, stream};
use serde_json::{Value, json};

const BUCKET: &str = "autoproxy-config";
const KEY: &str = "haproxy/haproxy.cfg";
const MANIFEST_KEY: &str = "haproxy/haproxy.manifest.json";
const PROXY: &str = "peering-proxy.tools.example.com";
const AT: &str = "2026-11-23T03:14:02Z";
const LATER: &str = "2026-11-23T03:20:00Z";
const LATER_STILL: &str = "2026-11-23T04:35:00Z";

/// moto, the config bucket, an organization, and the fault proxy the generator talks through.
struct Org {
    admin: SdkConfig,
    org: Organization,
    proxy: FaultProxy,
    _moto: Moto,
}

impl Org {
    async fn start() -> Org {
        let ConfigBucket { sdk: admin, moto } = ConfigBucket::start(BUCKET).await;
        let org = Organization::create(&admin).await.unwrap();
        let proxy = FaultProxy::start(SocketAddr::from(([127, 0, 0, 1], moto.port)));
        Org {
            admin,
            org,
            proxy,
            _moto: moto,
        }
    }

    /// `count` accounts in `unit`, each with `zones` private zones holding the API pair; the
    /// accounts and their zones' names, in the order created.
    async fn accounts(&self, unit: &str, tag: &str, count: usize, zones: usize) -> Vec<Member> {
        stream::iter(0..count)
            .map(|i| async move {
                let id = self.org.account(&format!("{tag}{i}"), unit).await?;
                let account = Account::assume(&self.admin, &id).await?;
                let specs: Vec<ZoneSpec> = (0..zones)
                    .map(|z| {
                        let zone = format!("{tag}{i}-{z}.example.internal");
                        ZoneSpec::private(zone.clone(), api_pair(&zone, PROXY))
                    })
                    .collect();
                let names = specs.iter().map(|spec| spec.name.clone()).collect();
                let seeded = account.seed(specs, 2).await?;
                Ok::<_, autoproxy_tests::estate::EstateError>(Member {
                    id,
                    zones: names,
                    zone_ids: seeded.into_iter().map(|s| s.id).collect(),
                    account,
                })
            })
            .buffered(8)
            .try_collect()
            .await
            .unwrap()
    }

    /// 300 accounts with two zones each: 100 in the chosen unit (20 of them in a unit below
    /// it, which belongs to it as a StackSet deploying there counts it) and 100 in each of two
    /// others. The chosen unit's id and its accounts.
    async fn three_units(&self) -> (String, Vec<Member>) {
        let root = self.org.root.clone();
        let chosen = self.org.unit(&root, "workloads").await.unwrap();
        let nested = self.org.unit(&chosen, "teams").await.unwrap();
        let sandbox = self.org.unit(&root, "sandbox").await.unwrap();
        let legacy = self.org.unit(&root, "legacy").await.unwrap();
        let mut members = self.accounts(&chosen, "w", 80, 2).await;
        members.extend(self.accounts(&nested, "t", 20, 2).await);
        let outside = [
            self.accounts(&sandbox, "s", 100, 2).await,
            self.accounts(&legacy, "l", 100, 2).await,
        ];
        assert_eq!(
            members.len() + outside.iter().map(Vec::len).sum::<usize>(),
            300
        );
        (chosen, members)
    }

    /// The generator as `main` builds it, talking to AWS through the fault proxy.
    async fn deps(&self, env: &BTreeMap<&str, String>) -> Deps {
        self.deps_in(env, OWN_ACCOUNT).await
    }

    /// The same, deployed in account `own` (which it never reads as a member). The credentials
    /// stay the management account's: moto answers `ListAccounts` only there, not in a
    /// delegated administrator.
    async fn deps_in(&self, env: &BTreeMap<&str, String>, own: &str) -> Deps {
        let settings = GenerateSettings::from_lookup(|name| env.get(name).cloned()).unwrap();
        let sdk = self
            .admin
            .to_builder()
            .endpoint_url(self.proxy.endpoint())
            .build();
        Deps::new(settings, &sdk, own).await.unwrap()
    }

    async fn object(&self, key: &str) -> String {
        autoproxy_tests::estate::object_text(&aws_sdk_s3::Client::new(&self.admin), BUCKET, key)
            .await
    }

    /// The manifest's account states: account → (state, since, reason).
    async fn states(&self) -> BTreeMap<String, (String, String, String)> {
        let manifest: Value = serde_json::from_str(&self.object(MANIFEST_KEY).await).unwrap();
        manifest["accounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                let field = |name: &str| s[name].as_str().unwrap().to_owned();
                (
                    field("account"),
                    (field("state"), field("since"), field("reason")),
                )
            })
            .collect()
    }
}

/// One member account as seeded.
struct Member {
    id: String,
    zones: Vec<String>,
    zone_ids: Vec<String>,
    account: Account,
}

/// The generator's environment: the settings that name the members, and nothing per account.
fn env(member_accounts: &str) -> BTreeMap<&'static str, String> {
    BTreeMap::from([
        ("CONFIG_BUCKET", BUCKET.to_owned()),
        ("PEERING_PROXY_HOSTNAME", PROXY.to_owned()),
        ("MEMBER_ACCOUNTS", member_accounts.to_owned()),
        ("MEMBER_ROLE_NAME", READER_ROLE.to_owned()),
        ("SCAN_OWN_ACCOUNT", "false".to_owned()),
        ("ROUTE53_REQUESTS_PER_SECOND", "1000".to_owned()),
        // Moto's one region, not the 38 it lists as every member's enabled ones.
        ("MEMBER_REGIONS", autoproxy_tests::moto::REGION.to_owned()),
    ])
}

async fn run(deps: &Deps, payload: &Value, at: &str) -> Summary {
    let summary = run_at(deps, payload, at, None)
        .await
        .unwrap_or_else(|err| panic!("{payload}: {err}"));
    println!(
        "{payload} at {at}: {} rules, accounts {:?}, warnings {}",
        summary.rules,
        summary.accounts,
        summary.warnings.len()
    );
    summary
}

/// The API routes' SNI names of the published config, sorted.
fn routed(config: &str) -> Vec<String> {
    assert_valid(config);
    let mut snis: Vec<String> = config
        .lines()
        .filter_map(|line| line.strip_prefix("#@route "))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(str::to_owned)
        .collect();
    snis.sort();
    snis
}

fn expected(members: &[&Member]) -> Vec<String> {
    let mut snis: Vec<String> = members
        .iter()
        .flat_map(|m| m.zones.iter().map(|zone| format!("proxy.api.{zone}")))
        .collect();
    snis.sort();
    snis
}

/// The run's main EMF document (dimension Function only).
fn metric(summary: &Summary, name: &str) -> f64 {
    summary.metrics[0][name]
        .as_f64()
        .unwrap_or_else(|| panic!("no metric {name} in {}", summary.metrics[0]))
}

fn counts(summary: &Summary) -> [usize; 4] {
    let a = summary.accounts;
    [a.ok, a.failing, a.not_onboarded, a.held]
}

#[tokio::test(flavor = "multi_thread")]
async fn a_unit_of_a_300_account_organization_is_routed_and_every_account_has_a_state() {
    let org = Org::start().await;
    let (chosen, members) = org.three_units().await;
    let (no_role, denying, throttled, breaking) =
        (&members[0], &members[1], &members[2], &members[85]);
    org.proxy.set(&no_role.id, Some(Fault::AssumeDenied));

    // Nothing per account in the environment: the same few bytes for 1 account or 10,000.
    let env = env(&chosen);
    let size: usize = env.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
    assert!(size < 512, "{size} bytes");
    assert!(
        members
            .iter()
            .all(|m| env.values().all(|v| !v.contains(&m.id)))
    );
    let deps = org.deps(&env).await;

    let first = run(&deps, &json!({}), AT).await;
    assert!(first.published, "{first:#?}");
    let onboarded: Vec<&Member> = members[1..].iter().collect();
    assert_eq!(routed(&org.object(KEY).await), expected(&onboarded));
    assert_eq!(counts(&first), [99, 0, 1, 0]);
    assert_eq!(metric(&first, "AccountsNotOnboarded"), 1.0);
    assert_eq!(metric(&first, "AccountsOk"), 99.0);
    let organizations = org.proxy.calls("organizations");
    assert!(organizations >= 4, "{organizations}");
    assert_eq!(metric(&first, "OrganizationsCalls"), organizations as f64);
    let states = org.states().await;
    assert_eq!(states.len(), 100);
    assert_eq!(states[&no_role.id].0, "not_onboarded");
    assert!(
        states[&no_role.id].2.contains("AccessDenied"),
        "{:?}",
        states[&no_role.id]
    );
    assert!(members.iter().all(|m| states[&m.id].1 == AT));

    // Now one role denies Route53, one account is throttled, and one role stops being
    // assumable: all three worked before, so they fail, and keep their routes.
    org.proxy.set(&denying.id, Some(Fault::Route53Denied));
    org.proxy.set(&throttled.id, Some(Fault::Route53Throttled));
    org.proxy.set(&breaking.id, Some(Fault::AssumeDenied));
    // A cold start: a warm one keeps the broken role's session (an hour) and sees the break
    // only when it expires.
    let deps = org.deps(&env).await;
    let second = run(&deps, &json!({}), LATER).await;
    assert_eq!(counts(&second), [96, 3, 1, 0]);
    // Every route stays. (The config itself may change: moto makes an account's default VPC
    // when its EC2 is first used, and under concurrent first calls one account's DescribeVpcs
    // of the first run can come back empty, its 172.31.0.0/16 appearing in the second.)
    assert_eq!(second.rules, 198, "{second:#?}");
    assert_eq!(routed(&org.object(KEY).await), expected(&onboarded));
    assert_eq!(metric(&second, "AccountsFailing"), 3.0);
    assert_eq!(metric(&second, "LongestFailingMinutes"), 0.0);
    let states = org.states().await;
    for (member, why) in [
        (denying, "AccessDenied"),
        (throttled, "Throttling"),
        (breaking, "AccessDenied"),
    ] {
        let (state, since, reason) = &states[&member.id];
        assert_eq!(
            (state.as_str(), since.as_str()),
            ("failing", LATER),
            "{reason}"
        );
        assert!(reason.contains(why), "{reason}");
    }
    assert_eq!(
        states[&no_role.id].1, AT,
        "not_onboarded since the first run"
    );

    // An hour and a quarter on, the alarm's figure has grown; nothing else moved.
    let third = run(&deps, &json!({}), LATER_STILL).await;
    assert_eq!(counts(&third), [96, 3, 1, 0]);
    assert_eq!(metric(&third, "LongestFailingMinutes"), 75.0);
    assert_eq!(routed(&org.object(KEY).await), expected(&onboarded));
}

#[tokio::test(flavor = "multi_thread")]
async fn one_account_deleting_every_zone_is_held_alone_until_forced() {
    let org = Org::start().await;
    let unit = org.org.unit(&org.org.root, "workloads").await.unwrap();
    let members = org.accounts(&unit, "g", 10, 2).await;
    let deps = org.deps(&env(&unit)).await;
    let first = run(&deps, &json!({}), AT).await;
    assert_eq!((first.published, first.rules), (true, 20));

    // One account deletes both its zones (10 % of the routes: under the estate-wide 50 %),
    // while another adds a cluster.
    let (deleting, adding) = (&members[3], &members[7]);
    for zone in &deleting.zone_ids {
        deleting.account.delete_zone(zone).await.unwrap();
    }
    let added = "g7-new.example.internal";
    adding
        .account
        .seed_zone(ZoneSpec::private(added, api_pair(added, PROXY)))
        .await
        .unwrap();
    let second = run(&deps, &json!({}), LATER).await;
    assert!(second.published, "{second:#?}");
    let all: Vec<&Member> = members.iter().collect();
    let mut with_added = expected(&all);
    with_added.push(format!("proxy.api.{added}"));
    with_added.sort();
    assert_eq!(routed(&org.object(KEY).await), with_added);
    assert_eq!(counts(&second), [9, 0, 0, 1]);
    assert_eq!(metric(&second, "AccountsHeld"), 1.0);
    let held: Vec<&Value> = second.metrics[1..].iter().collect();
    assert_eq!(held.len(), 1, "{:?}", second.metrics);
    assert_eq!(held[0]["Account"], json!(deleting.id));
    assert_eq!(held[0]["AccountHeld"], json!(1.0));
    assert!(
        second
            .warnings
            .iter()
            .any(|w| w.contains(&format!("{{\"force\": \"{}\"}}", deleting.id))),
        "{:?}",
        second.warnings
    );
    assert_eq!(org.states().await[&deleting.id].0, "held");

    // Still held on the next run; forcing another account releases nothing.
    let another = members[0].id.clone();
    let other = run(&deps, &json!({"force": another}), LATER).await;
    assert_eq!((other.published, counts(&other)), (false, [9, 0, 0, 1]));

    let held_id = deleting.id.clone();
    let forced = run(&deps, &json!({"force": held_id}), LATER_STILL).await;
    assert!(forced.published, "{forced:#?}");
    assert_eq!(counts(&forced), [10, 0, 0, 0]);
    let left: Vec<&Member> = members.iter().filter(|m| m.id != deleting.id).collect();
    let mut expected_now = expected(&left);
    expected_now.push(format!("proxy.api.{added}"));
    expected_now.sort();
    assert_eq!(routed(&org.object(KEY).await), expected_now);
    assert_eq!(org.states().await[&deleting.id].0, "ok");
}

/// The stack lists the whole Organization, whose management account no service-managed StackSet
/// ever reaches: its refused role leaves it `not_onboarded` with a reason that says how to
/// onboard it, while another account without a role gets the plain refusal. Organizations is
/// asked for the management account once per container, and only when a role was refused.
#[tokio::test(flavor = "multi_thread")]
async fn the_management_account_s_reason_says_to_deploy_the_member_template_by_hand() {
    let org = Org::start().await;
    let unit = org.org.unit(&org.org.root, "workloads").await.unwrap();
    let members = org.accounts(&unit, "m", 3, 1).await;
    // The stack runs in a tools account; moto's own account created the organization: it is
    // the management account, listed as a member like any other.
    let tools = members[2].id.clone();
    let management = OWN_ACCOUNT;
    org.proxy.set(management, Some(Fault::AssumeDenied));
    org.proxy.set(&members[0].id, Some(Fault::AssumeDenied));
    let deps = org.deps_in(&env("organization"), &tools).await;

    let before = org.proxy.calls("organizations");
    let first = run(&deps, &json!({}), AT).await;
    let first_calls = org.proxy.calls("organizations") - before;
    assert_eq!(counts(&first), [1, 0, 2, 0]);
    let states = org.states().await;
    let (state, _, reason) = &states[management];
    assert_eq!(state, "not_onboarded");
    assert!(
        reason.starts_with(autoproxy::accounts::MANAGEMENT_ACCOUNT) && reason.contains(management),
        "{reason}"
    );
    let (state, _, reason) = &states[&members[0].id];
    assert_eq!(state, "not_onboarded");
    assert!(
        !reason.contains("management account") && reason.contains("AccessDenied"),
        "{reason}"
    );

    // Warm: the management account is known, the listing alone is asked again.
    let before = org.proxy.calls("organizations");
    let second = run(&deps, &json!({}), LATER).await;
    let second_calls = org.proxy.calls("organizations") - before;
    assert_eq!(counts(&second), [1, 0, 2, 0]);
    assert_eq!(
        first_calls,
        second_calls + 1,
        "one DescribeOrganization, once"
    );
    assert!(
        org.states().await[management]
            .2
            .starts_with(autoproxy::accounts::MANAGEMENT_ACCOUNT)
    );

    // Every role assumed: nothing to tell apart, no DescribeOrganization at a cold start.
    org.proxy.set(management, None);
    org.proxy.set(&members[0].id, None);
    let deps = org.deps_in(&env("organization"), &tools).await;
    let before = org.proxy.calls("organizations");
    let third = run(&deps, &json!({}), LATER_STILL).await;
    assert_eq!(counts(&third), [3, 0, 0, 0]);
    assert_eq!(org.proxy.calls("organizations") - before, second_calls);
}
