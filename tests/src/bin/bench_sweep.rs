//! The generator under measurement, as its own process so its peak RSS is its own: builds
//! `Deps` like `main.rs` does (settings from the environment, adaptive retries) but with each
//! account's Route53 endpoint taken from `BENCH_ROUTE53_ENDPOINTS` (`account=url,…`, the
//! recording proxies), runs one full sweep (a scheduled event), prints a JSON line, waits for
//! a line on stdin, then runs one CloudTrail event for `BENCH_EVENT_ZONE` (the zone's manifest
//! key, `account/zone-id`: `autoproxy::manifest::zone_key`)
//! and prints another. With `MEMBER_ACCOUNTS` the members are listed from Organizations by the
//! generator itself, each member's Route53 still at its recording proxy. Driven by `bench`;
//! not a tool of its own.
#![allow(clippy::print_stdout, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Instant;

use autoproxy::route53::AccountRoute53;
use autoproxy::settings::GenerateSettings;
use autoproxy_generate::handler::{self, Deps};
use autoproxy_generate::members::Members;
use autoproxy_tests::bench;
use serde_json::{Value, json};

#[tokio::main]
async fn main() {
    let settings = GenerateSettings::from_env().expect("generator settings");
    let endpoints: BTreeMap<String, String> = std::env::var("BENCH_ROUTE53_ENDPOINTS")
        .expect("BENCH_ROUTE53_ENDPOINTS")
        .split(',')
        .filter_map(|pair| pair.split_once('='))
        .map(|(account, url)| (account.to_owned(), url.to_owned()))
        .collect();
    let sdk = handler::sdk_config().await;
    let own_account = aws_sdk_sts::Client::new(&sdk)
        .get_caller_identity()
        .send()
        .await
        .expect("GetCallerIdentity")
        .account
        .expect("an account id");
    let accounts = bench::proxied_accounts(
        &sdk,
        &own_account,
        &settings.account_roles,
        &endpoints,
        settings.route53_requests_per_second,
    )
    .await;
    let members = settings.member_accounts.clone().map(|members| {
        Members::new(members, &sdk, "aws", settings.route53_requests_per_second)
            .with_route53_endpoints(endpoints.clone())
    });
    let mut deps = Deps::with_accounts(settings, &sdk, accounts).expect("generator wiring");
    deps.members = members;

    let schedule: Value =
        serde_json::from_str(include_str!("../../../events/schedule.json")).expect("event");
    let sweep = run(&deps, &schedule).await;
    println!(
        "{}",
        json!({"phase": "sweep", "peak_rss_bytes": bench::peak_rss_bytes(), "run": sweep})
    );

    let mut line = String::new();
    std::io::stdin().read_line(&mut line).expect("stdin");
    if let Ok(zone) = std::env::var("BENCH_EVENT_ZONE")
        && let Some((account, zone_id)) = zone.split_once('/')
    {
        let mut event: Value = serde_json::from_str(include_str!(
            "../../../events/change-resource-record-sets.json"
        ))
        .expect("event");
        event["account"] = json!(account);
        event["detail"]["recipientAccountId"] = json!(account);
        event["detail"]["requestParameters"]["hostedZoneId"] = json!(zone_id);
        let incremental = run(&deps, &event).await;
        println!("{}", json!({"phase": "event", "run": incremental}));
    }
}

/// Every Route53 client of the run: the own account's and the roles', and the members'.
async fn clients(deps: &Deps) -> Vec<AccountRoute53> {
    let mut clients = deps.accounts.clone();
    if let Some(members) = &deps.members {
        clients.extend(members.clients().await);
    }
    clients
}

/// One invocation: wall time, Route53 calls per account (as the client counted them),
/// Organizations calls, and the summary's counts.
async fn run(deps: &Deps, payload: &Value) -> Value {
    let before: BTreeMap<String, u64> = clients(deps)
        .await
        .iter()
        .map(|account| (account.account.clone(), account.calls()))
        .collect();
    let started = Instant::now();
    let at = autoproxy::time::Stamp::now().to_string();
    let summary = autoproxy_tests::generator::run_at(deps, payload, &at, None)
        .await
        .expect("the generator run succeeds");
    let wall_ms = started.elapsed().as_secs_f64() * 1000.0;
    let calls: BTreeMap<String, u64> = clients(deps)
        .await
        .iter()
        .map(|account| {
            let before = before.get(&account.account).copied().unwrap_or(0);
            (account.account.clone(), account.calls() - before)
        })
        .collect();
    json!({
        "wall_ms": wall_ms,
        "calls": calls,
        "organizations_calls": summary
            .metrics
            .first()
            .and_then(|m| m["OrganizationsCalls"].as_f64())
            .map(|calls| calls as u64),
        "accounts": summary.accounts,
        "zones_scanned": summary.zones_scanned,
        "rules": summary.rules,
        "published": summary.published,
        "warnings": summary.warnings.len(),
        // The reply as Lambda would return it, and its warnings' share.
        "reply_bytes": serde_json::to_string(&summary).map_or(0, |text| text.len()),
        "warnings_bytes": serde_json::to_string(&summary.warnings).map_or(0, |text| text.len()),
    })
}
