//! `{"explain": "<name>"}` on the sample estate `make local` seeds (prod and staging in the
//! own account, payments in the member account, legacy pointing at another proxy), plus a
//! zone whose front is mistyped and a zone name held first by an account that never opted in.

use autoproxy::names::HostName;
use autoproxy_generate::explain::{self, Explanation};
use autoproxy_generate::handler::{InvocationError, Reply, function_handler};
use autoproxy_tests::estate::{Account, Record, ZoneSpec, api_pair};
use autoproxy_tests::local::StandIn;
use autoproxy_tests::moto::free_port;
use autoproxy_tests::pipeline::{BUCKET, MEMBER_ACCOUNT, PROXY_HOSTNAME};
use lambda_runtime::{Context, LambdaEvent};

use super::*;

/// The stand-in's estate and the generator as `main` builds it from the stand-in's settings.
struct Sample {
    stand_in: StandIn,
    deps: Deps,
    own: Account,
    member: Account,
}

async fn sample() -> Sample {
    let stand_in = StandIn::start(free_port()).await.unwrap();
    let sdk = stand_in.moto.sdk_config().await;
    let env = stand_in.env.clone();
    let settings = GenerateSettings::from_lookup(|name| {
        env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    })
    .unwrap();
    let deps = Deps::new(settings, &sdk, OWN_ACCOUNT).await.unwrap();
    Sample {
        own: Account::own(&sdk),
        member: Account::assume(&sdk, MEMBER_ACCOUNT).await.unwrap(),
        deps,
        stand_in,
    }
}

async fn ask(deps: &Deps, name: &str) -> Explanation {
    explain::explain(deps, &HostName::parse(name).unwrap())
        .await
        .unwrap()
}

/// Every fragment appears in one step of the answer.
fn assert_says(answer: &Explanation, fragments: &[&str]) {
    for fragment in fragments {
        assert!(
            answer.why.iter().any(|step| step.contains(fragment)),
            "{}: no step says {fragment:?}: {:#?}",
            answer.name,
            answer.why
        );
    }
}

/// Every object version in the config bucket: what a write would add to.
async fn versions(sample: &Sample) -> usize {
    let sdk = sample.stand_in.moto.sdk_config().await;
    let listed = aws_sdk_s3::Client::new(&sdk)
        .list_object_versions()
        .bucket(BUCKET)
        .send()
        .await
        .unwrap();
    listed.versions().len()
}

/// The sample after two runs: the first with `shared.example.internal` held by the member
/// account (not opted in); the second after the own account's zone of that name opted in and
/// the member's `typo.example.internal` pointed at a mistyped proxy name.
async fn run_twice() -> (Sample, String, String) {
    let s = sample().await;
    // Held first by the member account, which never opted in.
    let holder = s
        .member
        .seed_zone(ZoneSpec::private(
            "shared.example.internal",
            vec![Record::a("api.shared.example.internal", "10.9.0.1")],
        ))
        .await
        .unwrap();
    let first = run(&s.deps, &json!({}), AT).await;
    assert!(first.published, "{first:?}");
    // Then a zone of that name opts in from the own account, and one with a typo.
    let newcomer = s
        .own
        .seed_zone(ZoneSpec::private(
            "shared.example.internal",
            api_pair("shared.example.internal", PROXY_HOSTNAME),
        ))
        .await
        .unwrap();
    s.member
        .seed_zone(ZoneSpec::private(
            "typo.example.internal",
            api_pair("typo.example.internal", "peering-prxoy.tools.example.com"),
        ))
        .await
        .unwrap();
    let second = run(&s.deps, &json!({}), LATER).await;
    assert!(
        second.warnings.iter().any(|w| w.contains("peering-prxoy")),
        "the run warns about the typo too: {:#?}",
        second.warnings
    );
    (s, newcomer.id, holder.id)
}

#[tokio::test(flavor = "multi_thread")]
async fn explain_says_why_each_sample_name_is_or_is_not_routed() {
    let (s, newcomer, holder) = run_twice().await;
    let before = versions(&s).await;

    let routed = ask(&s.deps, "proxy.api.payments.example.internal").await;
    assert!(routed.routed, "{routed:#?}");
    assert_eq!(routed.account.as_deref(), Some(MEMBER_ACCOUNT));
    assert_eq!(routed.rule.as_deref(), Some("api"));
    assert_eq!(
        routed.generation,
        Some(AT_SECS),
        "the route is as first published"
    );
    assert_says(
        &routed,
        &[
            "routes it: SNI proxy.api.payments.example.internal → api.payments.example.internal:443",
            "is a CNAME to the peering proxy peering-proxy.tools.example.com",
            "ownership: this zone holds the name payments.example.internal",
        ],
    );
    assert_eq!(routed.records.len(), 2, "{:?}", routed.records);

    let refused = ask(&s.deps, "proxy.api.shared.example.internal").await;
    assert!(!refused.routed, "{refused:#?}");
    assert_eq!(refused.account.as_deref(), Some(OWN_ACCOUNT));
    assert_eq!(
        refused.zone.as_ref().map(|z| z.id.as_str()),
        Some(newcomer.as_str())
    );
    assert_eq!(
        refused.ownership.as_deref(),
        Some(
            format!(
                "refused; the name shared.example.internal is held by zone {holder} in account \
                 {MEMBER_ACCOUNT}"
            )
            .as_str()
        )
    );
    assert!(
        refused
            .refusal
            .as_deref()
            .is_some_and(|r| r.contains(&format!("account {MEMBER_ACCOUNT} held the name first"))),
        "{refused:#?}"
    );
    assert_says(
        &refused,
        &["has no route for SNI proxy.api.shared.example.internal"],
    );

    let typo = ask(&s.deps, "proxy.api.typo.example.internal").await;
    assert!(!typo.routed);
    assert_says(
        &typo,
        &[
            "proxy.api.typo.example.internal is a CNAME to peering-prxoy.tools.example.com, one \
             edit away from the peering proxy's name peering-proxy.tools.example.com",
        ],
    );
    let legacy = ask(&s.deps, "proxy.api.legacy.example.internal").await;
    assert!(!legacy.routed);
    assert_says(
        &legacy,
        &["another name under the proxy's zone tools.example.com"],
    );

    let unknown = ask(&s.deps, "proxy.api.nowhere.example.internal").await;
    assert!(!unknown.routed);
    assert_eq!(unknown.account, None);
    assert_says(
        &unknown,
        &["private zones the last run knew", "is not routed"],
    );

    // Explaining wrote nothing.
    assert_eq!(versions(&s).await, before);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_lambda_answers_explain_as_its_own_shape_and_refuses_bad_names() {
    let s = sample().await;
    run(&s.deps, &json!({}), AT).await;
    let invoke =
        |payload: Value| function_handler(&s.deps, LambdaEvent::new(payload, Context::default()));
    let reply = invoke(json!({"explain": "\\052.INT.prod.example.internal."}))
        .await
        .unwrap();
    let Reply::Explain(answer) = &reply else {
        panic!("a run's summary for explain: {reply:?}");
    };
    assert!(answer.routed);
    let shape = serde_json::to_value(&reply).unwrap();
    assert_eq!(shape["name"], "*.int.prod.example.internal");
    assert!(
        shape["why"].is_array() && shape.get("rules").is_none(),
        "{shape}"
    );
    for (payload, expected) in [
        (json!({"explain": 5}), "expected a name as a string, got 5"),
        (json!({"explain": "a#b.internal"}), "containing '#'"),
        (
            json!({"explain": "a.internal", "dry_run": true}),
            "and no other field",
        ),
    ] {
        let err = invoke(payload.clone()).await.unwrap_err();
        assert!(
            matches!(err, GenerateError::Invalid(InvocationError::Explain(_))),
            "{payload}: {err}"
        );
        assert!(err.to_string().contains(expected), "{payload}: {err}");
    }
}
