//! `make demo`: the whole pipeline on this machine, narrated. The functions run as Lambda
//! functions (`cargo lambda watch` + `cargo lambda invoke`) against moto, the fleet is a real
//! HAProxy on loopback, backends are `openssl s_server`, names resolve through dnsmasq.
//! Everything started is stopped at the end or on Ctrl-C; files go to `.demo/` (gitignored).
//! The instances run the workspace's debug agent, stripped, or the build
//! `AUTOPROXY_AGENT_BINARY` names (`make demo-release`: the release agent the stack ships).
#![allow(clippy::print_stdout)]

use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use autoproxy::fleet::{FleetReport, Join};
use autoproxy_tests::pipeline::{
    self, ANALYTICS, Cluster, INITIAL, Pipeline, PipelineError, Rollout, Runner, STAGING,
};

static START: OnceLock<Instant> = OnceLock::new();

fn say(line: &str) {
    let elapsed = START.get().map_or(Duration::ZERO, Instant::elapsed);
    println!("demo: [{:>6.1}s] {line}", elapsed.as_secs_f64());
}

fn secs(d: Duration) -> String {
    format!("{:.2}s", d.as_secs_f64())
}

/// How long HAProxy may take to serve a route after the apply (it resolves the new worker's
/// server names through the resolver within about a second).
const ROUTE_TIMEOUT: Duration = Duration::from_secs(15);

#[tokio::main]
async fn main() {
    START.get_or_init(Instant::now);
    tokio::spawn(async {
        if tokio::signal::ctrl_c().await.is_ok() {
            pipeline::stop_everything();
            println!("\ndemo: interrupted: stopped everything it had started");
            std::process::exit(130);
        }
    });
    match run().await {
        Ok(()) => say("done: everything it started is stopped; files are in .demo/"),
        Err(err) => {
            say(&format!("FAILED: {err}"));
            say("logs: .demo/ (lambda.log, dnsmasq.log, backend-*.log, events/)");
            std::process::exit(1);
        }
    }
}

async fn run() -> Result<(), PipelineError> {
    let root = autoproxy_tests::root();
    for function in ["autoproxy-generate", "autoproxy-configure"] {
        let started = Instant::now();
        build(&root, function)?;
        say(&format!("built {function} ({})", secs(started.elapsed())));
    }

    let chosen = autoproxy_tests::agent_from_env().map_err(|detail| PipelineError::Step {
        what: "agent".to_owned(),
        detail,
    })?;
    match chosen {
        // `make demo-release`: the agent the stack ships, as the benchmarks run it.
        Some(agent) => say(&format!(
            "agent: autoproxy-agent at {} ({})",
            agent.display(),
            autoproxy_tests::AGENT_BINARY_VAR
        )),
        None => use_debug_agent(&root),
    }

    let pipeline = Pipeline::start(Runner::LambdaRuntime, Some(root.join(".demo")), &say).await?;
    let result = story(pipeline).await;
    say("stopping HAProxy, dnsmasq, the backends, the Lambda runtime and moto");
    result
}

/// What `cargo lambda watch` runs is `cargo run --bin <function>`: build exactly that now, so
/// the first invocation does not compile.
fn build(root: &Path, function: &str) -> Result<(), PipelineError> {
    let status = Command::new("cargo")
        .args(["build", "--quiet", "--bin", function])
        .current_dir(root)
        .status()
        .map_err(|e| step(format!("cargo build --bin {function}"), e))?;
    if status.success() {
        Ok(())
    } else {
        Err(step(format!("cargo build --bin {function}"), status))
    }
}

// By value: callers hand over what they are done with.
#[allow(clippy::needless_pass_by_value)]
fn step(what: String, detail: impl ToString) -> PipelineError {
    PipelineError::Step {
        what,
        detail: detail.to_string(),
    }
}

async fn story(mut pipeline: Pipeline) -> Result<(), PipelineError> {
    say(
        "1. full reconciliation: cargo lambda invoke autoproxy-generate --data-file events/schedule.json",
    );
    let rollout = pipeline.roll_out(&pipeline::schedule_event(), &[]).await?;
    narrate(&rollout)?;
    for cluster in INITIAL {
        show_routes(
            &pipeline,
            cluster,
            cluster.proxy == pipeline::PROXY_HOSTNAME,
        )?;
    }

    let added = add_cluster(&mut pipeline).await?;
    let removed = remove_cluster(&mut pipeline).await?;
    say(&format!(
        "summary: event → route served {} (added), {} (removed)",
        secs(added),
        secs(removed)
    ));
    fleet_report(&pipeline).await
}

/// Step 2: a cluster added in Route53, followed until HAProxy serves it; the time it took.
async fn add_cluster(pipeline: &mut Pipeline) -> Result<Duration, PipelineError> {
    say(&format!(
        "2. Route53 change: zone {} with both rules created in account {}",
        ANALYTICS.zone(),
        ANALYTICS.account
    ));
    let event = pipeline.add_cluster(ANALYTICS).await?;
    say(&format!(
        "   resolver reloaded; CloudTrail ChangeResourceRecordSets for zone {} → autoproxy-generate",
        event["detail"]["requestParameters"]["hostedZoneId"]
            .as_str()
            .unwrap_or("?")
    ));
    let event_sent = Instant::now();
    let rollout = pipeline.roll_out(&event, &[]).await?;
    narrate(&rollout)?;
    let served = wait(
        pipeline,
        &ANALYTICS.api_sni(),
        Some(&ANALYTICS.api_backend()),
    )?;
    let total = event_sent.elapsed();
    say(&format!(
        "   {} (first answer {} after the apply)",
        pipeline.probe(&ANALYTICS.api_sni()),
        secs(served)
    ));
    show_routes(pipeline, ANALYTICS, true)?;
    say(&format!(
        "   CloudTrail event → HAProxy serving the new route: {}",
        secs(total)
    ));
    say(&breakdown(&rollout, served, total));
    Ok(total)
}

/// The workspace's debug agent, stripped, for the apply document to download and run.
fn use_debug_agent(root: &Path) {
    let dir = root.join("target").join("demo");
    match std::fs::create_dir_all(&dir)
        .map_err(|e| e.to_string())
        .and_then(|()| autoproxy_tests::use_stripped_agent(&dir))
    {
        Ok(agent) => say(&format!(
            "agent: autoproxy-agent (debug build, stripped as the stack's release is) at {}",
            agent.display()
        )),
        Err(err) => say(&format!("agent: the debug build as it is ({err})")),
    }
}

/// Step 3: a zone deleted, followed until HAProxy no longer routes it; the time it took.
async fn remove_cluster(pipeline: &mut Pipeline) -> Result<Duration, PipelineError> {
    say(&format!(
        "3. Route53 change: zone {} deleted in account {}",
        STAGING.zone(),
        STAGING.account
    ));
    let event = pipeline.remove_cluster(STAGING).await?;
    say("   resolver reloaded; CloudTrail DeleteHostedZone → autoproxy-generate");
    let event_sent = Instant::now();
    let rollout = pipeline.roll_out(&event, &[]).await?;
    narrate(&rollout)?;
    let gone = wait(pipeline, &STAGING.api_sni(), None)?;
    let removed = event_sent.elapsed();
    show_routes(pipeline, STAGING, false)?;
    say(&format!(
        "   CloudTrail event → HAProxy no longer routing the deleted zone: {}",
        secs(removed)
    ));
    say(&breakdown(&rollout, gone, removed));
    say(&format!(
        "   still routed: {}",
        pipeline::routed(&pipeline.zones)
            .into_iter()
            .collect::<Vec<_>>()
            .join(", ")
    ));
    Ok(removed)
}

/// Where the time from the event to HAProxy serving went.
fn breakdown(rollout: &Rollout, probing: Duration, total: Duration) -> String {
    let parts = rollout.generate_time + rollout.configure_time + rollout.apply_time + probing;
    format!(
        "   of which: autoproxy-generate {}, autoproxy-configure {}, the apply document on {} \
         instance(s) {}, probing until served {}, the rest (reading the command back) {}",
        secs(rollout.generate_time),
        secs(rollout.configure_time),
        rollout.runs.len(),
        secs(rollout.apply_time),
        secs(probing),
        secs(total.saturating_sub(parts))
    )
}

/// Step 4: the fleet report, once every record is in.
async fn fleet_report(pipeline: &Pipeline) -> Result<(), PipelineError> {
    say(
        "4. is the fleet up to date? cargo lambda invoke autoproxy-configure --data-file events/fleet-report.json",
    );
    let report = fleet_caught_up(pipeline).await?;
    for line in report.table().lines() {
        say(&format!("   {line}"));
    }
    if let Join::Missing { .. } = report.join {
        say(
            "   (the local stand-in cannot list instances: moto has no SSM \
             DescribeInstanceInformation, so the report has the instances' records alone)",
        );
    }
    say(&format!(
        "   {} of {} instances run the latest generation {}",
        report.instances - report.behind,
        report.instances,
        report.latest_generation
    ));
    Ok(())
}

/// The fleet report once every instance's record names the latest generation: each apply
/// sends its record in the background, so the last ones may still be on their way (20 s at
/// most, then the report as it stands).
async fn fleet_caught_up(pipeline: &Pipeline) -> Result<FleetReport, PipelineError> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let value = pipeline.fleet_report().await?;
        let report: FleetReport = serde_json::from_value(value.clone())
            .map_err(|e| step(format!("read the fleet report {value}"), e))?;
        let all_current =
            report.instances as usize == pipeline.instance_ids.len() && report.behind == 0;
        if all_current || Instant::now() >= deadline {
            return Ok(report);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// What each function did and what the agent ran.
fn narrate(rollout: &Rollout) -> Result<(), PipelineError> {
    let s = &rollout.summary;
    let warnings = s["warnings"].as_array().map_or(0, Vec::len);
    if !rollout.published() {
        say(&format!(
            "   autoproxy-generate ({}): {} zones, {} rules, unchanged: nothing published",
            secs(rollout.generate_time),
            s["zones_scanned"],
            s["rules"]
        ));
        return Ok(());
    }
    say(&format!(
        "   autoproxy-generate ({}): {} zone(s) read, {} rules, {} warning(s); published s3://{}/{} version {}",
        secs(rollout.generate_time),
        s["zones_scanned"],
        s["rules"],
        warnings,
        pipeline::BUCKET,
        pipeline::CONFIG_KEY,
        s["version_id"].as_str().unwrap_or("?")
    ));
    for line in s["diff"].as_str().unwrap_or_default().lines().filter(|l| {
        ["+#@route ", "-#@route ", "+#@suffix ", "-#@suffix "]
            .iter()
            .any(|prefix| l.starts_with(prefix))
    }) {
        say(&format!("     {}", line.trim_end()));
    }
    if let Some(command) = &rollout.command {
        say(&format!(
            "   autoproxy-configure ({}): S3 ObjectCreated → ssm:SendCommand {} document {} to {} ({} instances)",
            secs(rollout.configure_time),
            command.command_id,
            command.document,
            command.targets.join(" "),
            command.instance_ids.len()
        ));
        let params: Vec<String> = command
            .parameters
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        say(&format!(
            "     parameters (from moto's ListCommands): {}",
            params.join(" ")
        ));
    }
    for (instance, run) in &rollout.runs {
        let what = if let Some(done) = run.step("done").first() {
            (*done).to_owned()
        } else if let Some(skip) = run.step("skip").first() {
            format!("skipped: {skip} (both instances share the one local HAProxy)")
        } else {
            format!("FAILED: {}", run.failure().unwrap_or("see below"))
        };
        say(&format!(
            "   SSM agent stand-in on {instance} ({}): {what}",
            secs(run.elapsed())
        ));
        if !run.success() {
            println!("{run}");
        }
    }
    if !rollout.applied() {
        return Err(step(
            "apply".to_owned(),
            "the apply document failed (transcript above)",
        ));
    }
    Ok(())
}

fn wait(pipeline: &Pipeline, sni: &str, backend: Option<&str>) -> Result<Duration, PipelineError> {
    pipeline
        .wait_for(sni, backend, ROUTE_TIMEOUT)
        .map_err(|probe| {
            step(
                format!("SNI {sni}"),
                format!(
                    "expected {}, got: {probe}\n{}",
                    backend.unwrap_or("no route"),
                    pipeline.haproxy.log()
                ),
            )
        })
}

/// Probes both rules of a cluster and checks the answer.
fn show_routes(pipeline: &Pipeline, cluster: Cluster, routed: bool) -> Result<(), PipelineError> {
    for (sni, backend) in [
        (cluster.api_sni(), cluster.api_backend()),
        (cluster.ingress_sni(), cluster.ingress_backend()),
    ] {
        let want = routed.then_some(backend.as_str());
        wait(pipeline, &sni, want)?;
        say(&format!("   client: {}", pipeline.probe(&sni)));
    }
    Ok(())
}
