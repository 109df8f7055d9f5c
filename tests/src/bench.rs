//! The scale benchmark's building blocks: a synthetic estate of zones × records
//! across accounts, seeded into moto; the generator's Route53 clients pointed at one
//! [`RecordingProxy`](crate::recording_proxy::RecordingProxy) per account; the minimum number
//! of Route53 calls a full sweep needs; a synthetic route set of any size for the renderer;
//! and the timings of a render, a `haproxy -c` and the release binaries' sizes.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use autoproxy::model::{RecordSet, Route, Zone, ZoneRecords};
use autoproxy::names::HostName;
use autoproxy::render::{DEFAULT_TEMPLATE, RenderInput, RenderOptions, Renderer};
use autoproxy::route53::{AccountRoute53, RECORDS_PER_PAGE, ZONES_PER_PAGE};
use autoproxy::rules::{DEFAULT_RULES, merge_claims, zone_routes};
use autoproxy::settings::RoleArn;
use aws_config::SdkConfig;
use aws_config::sts::AssumeRoleProvider;
use futures_util::future::try_join_all;

use crate::check::haproxy_check;
use crate::estate::{self, Account, EstateError, Seeded, Wildcard, ZoneSpec};
use crate::moto::OWN_ACCOUNT;

/// The name every rule CNAME points at.
pub const PROXY: &str = "peering-proxy.tools.example.com";

/// What to seed: `zones` zones of `records` record sets each, spread evenly over `accounts`
/// accounts; every `rules_every`-th zone carries both rule pairs (4 of its record sets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub zones: usize,
    pub records: usize,
    pub accounts: usize,
    pub rules_every: usize,
}

impl Shape {
    /// The own account first, then member accounts 100000000001, 100000000002, …
    pub fn account_ids(&self) -> Vec<String> {
        (0..self.accounts.max(1))
            .map(|i| match i {
                0 => OWN_ACCOUNT.to_owned(),
                _ => format!("{:012}", 100_000_000_000u64 + i as u64),
            })
            .collect()
    }

    /// Whether the zone named `name` (as [`Shape::zone_specs`] names them) has rule pairs.
    pub fn has_rules(&self, name: &str) -> bool {
        name.strip_prefix('c')
            .and_then(|rest| rest.split('.').next()?.parse::<usize>().ok())
            .is_some_and(|i| self.rules_every > 0 && i % self.rules_every == 0)
    }

    /// The zones of the account at `index`: zone `i` goes to account `i % accounts`.
    pub fn zone_specs(&self, index: usize) -> Vec<ZoneSpec> {
        let accounts = self.accounts.max(1);
        (index..self.zones)
            .step_by(accounts)
            .map(|i| {
                let name = format!("c{i:05}.bench.internal");
                let mut records = Vec::with_capacity(self.records);
                if self.has_rules(&name) {
                    records.extend(estate::api_pair(&name, PROXY));
                    records.extend(estate::ingress_pair(&name, PROXY, Wildcard::Literal));
                }
                let filler = self.records.saturating_sub(records.len());
                records.extend(estate::filler(&name, filler));
                ZoneSpec::private(name, records)
            })
            .collect()
    }

    /// Routes the estate must produce: two per zone with both rule pairs.
    pub fn expected_routes(&self) -> usize {
        match self.rules_every {
            0 => 0,
            every => 2 * self.zones.div_ceil(every),
        }
    }
}

/// Seeds every account at once (moto keeps assumed-role accounts apart); `parallelism`
/// zones at a time per account.
pub async fn seed(
    sdk: &SdkConfig,
    shape: &Shape,
    parallelism: usize,
) -> Result<BTreeMap<String, Vec<Seeded>>, EstateError> {
    seed_accounts(sdk, shape, shape.account_ids(), parallelism).await
}

/// [`seed`] into these accounts (the own one first), e.g. accounts an organization created.
pub async fn seed_accounts(
    sdk: &SdkConfig,
    shape: &Shape,
    ids: Vec<String>,
    parallelism: usize,
) -> Result<BTreeMap<String, Vec<Seeded>>, EstateError> {
    let seeded = try_join_all(ids.into_iter().enumerate().map(|(index, id)| async move {
        let account = if id == OWN_ACCOUNT {
            Account::own(sdk)
        } else {
            Account::assume(sdk, &id).await?
        };
        let zones = account.seed(shape.zone_specs(index), parallelism).await?;
        Ok::<_, EstateError>((id, zones))
    }))
    .await?;
    Ok(seeded.into_iter().collect())
}

/// An organization with one unit holding `members` new accounts (moto picks their ids): the
/// unit's id and the accounts', the own (management) account first.
pub async fn organization_unit(
    sdk: &SdkConfig,
    members: usize,
) -> Result<(String, Vec<String>), EstateError> {
    use futures_util::{StreamExt, TryStreamExt, stream};
    let organization = crate::organization::Organization::create(sdk).await?;
    let unit = organization.unit(&organization.root, "bench").await?;
    let (organization, unit_id) = (&organization, unit.as_str());
    let mut ids: Vec<String> = stream::iter(0..members)
        .map(|i| async move { organization.account(&format!("bench{i}"), unit_id).await })
        .buffered(8)
        .try_collect()
        .await?;
    ids.insert(0, OWN_ACCOUNT.to_owned());
    Ok((unit, ids))
}

/// The fewest Route53 calls that read every private zone of an account once: its pages of
/// zones plus each zone's pages of records (every listing includes NS and SOA).
pub fn minimum_calls(zones: &[Seeded]) -> u64 {
    let pages = |items: usize, per_page: i32| items.div_ceil(per_page as usize).max(1) as u64;
    pages(zones.len(), ZONES_PER_PAGE)
        + zones
            .iter()
            .map(|zone| pages(zone.listed_records(), RECORDS_PER_PAGE))
            .sum::<u64>()
}

/// The generator's Route53 clients as `Deps::new` builds them (the own account's config, an
/// assumed-role provider per member account), except that each account's Route53 endpoint
/// is `endpoints[account]`: its recording proxy. STS and S3 stay on `sdk`'s endpoint.
pub async fn proxied_accounts(
    sdk: &SdkConfig,
    own_account: &str,
    roles: &[RoleArn],
    endpoints: &BTreeMap<String, String>,
    requests_per_second: f64,
) -> Vec<AccountRoute53> {
    let endpoint = |account: &str| {
        endpoints
            .get(account)
            .unwrap_or_else(|| panic!("no Route53 endpoint for account {account}"))
            .clone()
    };
    let own = aws_sdk_route53::config::Builder::from(sdk)
        .endpoint_url(endpoint(own_account))
        .build();
    let mut accounts = vec![AccountRoute53::new(own_account, &own, requests_per_second)];
    for role in roles.iter().filter(|role| role.account != own_account) {
        let provider = AssumeRoleProvider::builder(&role.arn)
            .session_name("autoproxy-bench")
            .configure(sdk)
            .build()
            .await;
        let config = aws_sdk_route53::config::Builder::from(sdk)
            .credentials_provider(provider)
            .endpoint_url(endpoint(&role.account))
            .build();
        accounts.push(AccountRoute53::new(
            &role.account,
            &config,
            requests_per_second,
        ));
    }
    accounts
}

/// `zones` private zones with both rule pairs: `2 × zones` routes, as the generator would
/// merge them.
pub fn synthetic_routes(zones: usize) -> Vec<Route> {
    let proxies = [HostName::parse(PROXY).expect("proxy host name")];
    let mut candidates = Vec::with_capacity(2 * zones);
    for i in 0..zones {
        let name = format!("r{i:05}.bench.internal.");
        let zone = ZoneRecords {
            unnamed_left: 0,
            zone: Zone {
                account: format!("{:012}", 100_000_000_000u64 + (i % 50) as u64),
                id: format!("Z{i:06}"),
                name: name.clone(),
                private: true,
            },
            records: vec![
                RecordSet::new(&format!("api.{name}"), "A", &["10.0.0.1"]),
                RecordSet::new(&format!("proxy.api.{name}"), "CNAME", &[PROXY]),
                RecordSet::new(&format!("\\052.int.{name}"), "CNAME", &[PROXY]),
                RecordSet::new(
                    &format!("ingress-int.{name}"),
                    "CNAME",
                    &["elb.example.com"],
                ),
            ],
        };
        candidates.extend(zone_routes(&DEFAULT_RULES, &zone, &proxies).routes);
    }
    merge_claims(candidates).0
}

/// Peak resident set size of this process so far (`VmHWM`), in bytes.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The machine a benchmark ran on, for its report: date, cores, memory, CPU, kernel, HAProxy,
/// then `extra`.
pub fn machine(extra: &str) -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_owned())
        .unwrap_or_else(|| "unknown".into());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let memory = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|l| l.split_whitespace().next()?.parse::<u64>().ok())
        .map_or("unknown".into(), |kib| {
            format!("{:.1} GiB", kib as f64 / 1048576.0)
        });
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let date = output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]);
    let kernel = output("uname", &["-sr"]);
    let haproxy = output("haproxy", &["-v"]);
    let haproxy = haproxy.lines().next().unwrap_or("");
    format!(
        "{date}; {cores} cores (nproc); {memory} memory; CPU: {cpu}; {kernel}; {haproxy}{}",
        if extra.is_empty() {
            String::new()
        } else {
            format!("; {extra}")
        }
    )
}

fn output(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

/// Median of five renders, in ms, and the rendered text.
pub fn time_render(routes: &[Route]) -> (f64, String) {
    let (times, text) = render_times(routes, 5);
    (times[2].as_secs_f64() * 1000.0, text)
}

/// `runs` renders of `routes` with the default template and options: their times, fastest
/// first, and the rendered text.
pub fn render_times(routes: &[Route], runs: usize) -> (Vec<Duration>, String) {
    let renderer = Renderer::new(DEFAULT_TEMPLATE).expect("default template");
    let resolvers = ["169.254.169.253:53".parse().unwrap()];
    let options = RenderOptions::default();
    let input = RenderInput {
        routes,
        resolvers: &resolvers,
        proxies: &[],
        options: &options,
        generation: 1,
        generated_at: "2026-01-01T00:00:00Z",
        trigger: "bench",
    };
    let mut times = Vec::new();
    let mut text = String::new();
    for _ in 0..runs {
        let started = Instant::now();
        text = renderer.render(&input).expect("render").text;
        times.push(started.elapsed());
    }
    times.sort();
    (times, text)
}

/// `haproxy -c -dW` as the tests run it (server names mapped in a private /etc/hosts), ms.
pub fn time_check(config: &str) -> (f64, bool) {
    let started = Instant::now();
    let checked = haproxy_check(config);
    if !checked.success {
        println!("haproxy -c:\n{}", checked.output);
    }
    (started.elapsed().as_secs_f64() * 1000.0, checked.success)
}

/// The size of `target/lambda/<function>/bootstrap`, and a note if it is missing or is not
/// the real function (a stale stub exits 0; the real one refuses to start without settings).
pub fn binary_size(function: &str) -> (String, Option<String>) {
    let path = crate::root().join(format!("target/lambda/{function}/bootstrap"));
    let Ok(meta) = std::fs::metadata(&path) else {
        return (
            "missing".into(),
            Some(format!(
                "{}: not built (make bench builds it)",
                path.display()
            )),
        );
    };
    let size = format!("{:.2} MB", meta.len() as f64 / 1e6);
    match Command::new(&path)
        .env_clear()
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Ok(status) if !status.success() => (size, None),
        _ => (
            format!("{size} (NOT the function)"),
            Some(format!(
                "{}: started without settings it did not refuse to run: a stale or stub build",
                path.display()
            )),
        ),
    }
}
