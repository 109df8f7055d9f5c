//! Events → trigger (S3 events → dispatch: `s3_events`).

use super::*;

/// A field: missing, a typical value, or any JSON value.
pub(super) fn field(typical: BoxedStrategy<String>) -> BoxedStrategy<Option<Value>> {
    prop_oneof![
        1 => Just(None),
        14 => typical.prop_map(|s| Some(Value::String(s))),
        1 => json().prop_map(Some),
    ]
    .boxed()
}

/// A well-formed value with one character put in, or one changed.
pub(super) fn near(valid: BoxedStrategy<String>) -> BoxedStrategy<String> {
    let odd = prop_oneof![
        3 => select(vec![
            '.', ' ', '\n', '/', '-', '_', ':', '\0', '١', '１', 'Ｚ', 'é', '\u{a0}', '#', '*',
        ]),
        1 => any::<char>(),
    ];
    (valid, odd, any::<usize>(), any::<bool>())
        .prop_map(|(text, odd, at, replace)| {
            let mut chars: Vec<char> = text.chars().collect();
            let at = at % (chars.len() + 1);
            if replace && at < chars.len() {
                chars[at] = odd;
            } else {
                chars.insert(at, odd);
            }
            chars.into_iter().collect()
        })
        .boxed()
}

pub(super) fn account_id() -> BoxedStrategy<String> {
    prop_oneof![
        12 => re("[0-9]{12}"),
        3 => near(re("[0-9]{12}")),
        1 => re("[0-9]{0,11}"),
        1 => re("[0-9]{13,20}"),
        2 => select(vec![
            "١٢٣٤٥٦٧٨٩٠١٢", " 12345678901", "12345678901\n", "123456789012 ", "0x1234567890",
            "-12345678901", "+12345678901", "1234567890１２", "12345678901\u{0}",
        ])
        .prop_map(String::from),
        1 => junk(),
    ]
    .boxed()
}

pub(super) fn zone_id() -> BoxedStrategy<String> {
    prop_oneof![
        6 => re("Z[0-9A-Z]{1,30}"),
        6 => re("/hostedzone/Z[0-9A-Za-z]{1,30}"),
        4 => near(re("(/hostedzone/)?Z[0-9A-Z]{1,30}")),
        2 => select(vec![
            "/hostedzone/../x", "/hostedzone/", "", "/", "..", "/hostedzone/Z1/", "Z1; rm -rf /",
            "/hostedzone/Z1 ", "Z\u{0}1", "/change/C0EXAMPLE", "../../../etc/passwd", "Z1\nZ2",
            "Ｚ１", "/hostedzone/Z1%2F..", "Z1\\", "/hostedzone/é",
        ])
        .prop_map(String::from),
        1 => re("(/hostedzone/)?[ -~]{0,40}"),
        1 => re("[Zz][0-9a-z]{31,40}"),
        1 => junk(),
    ]
    .boxed()
}

/// An EventBridge event shaped like the ones the generator takes, each field missing, typical
/// or any JSON value.
pub(super) fn eventbridge() -> BoxedStrategy<Value> {
    let detail_type = prop_oneof![
        8 => Just("AWS API Call via CloudTrail".to_owned()),
        2 => Just("Scheduled Event".to_owned()),
        1 => junk(),
    ]
    .boxed();
    let source = prop_oneof![
        8 => Just("aws.route53".to_owned()),
        1 => select(vec!["aws.events", "aws.ec2", "AWS.ROUTE53", "aws.route53 "])
            .prop_map(String::from),
        1 => junk(),
    ]
    .boxed();
    let event_name = prop_oneof![
        8 => select(ROUTE53_EVENTS.to_vec()).prop_map(String::from),
        1 => select(vec!["ListHostedZones", "changeresourcerecordsets", ""]).prop_map(String::from),
        1 => junk(),
    ]
    .boxed();
    (
        (field(detail_type), field(source), field(account_id())),
        (field(event_name), field(account_id())),
        (field(zone_id()), field(zone_id()), field(zone_id())),
        proptest::option::weighted(0.1, json()),
        proptest::option::weighted(0.1, json()),
        proptest::option::weighted(0.2, (key(), json())),
        proptest::option::weighted(0.05, (0_usize..5, huge())),
        // CloudTrail's recipient is the envelope's account, but for a forged or odd event.
        proptest::bool::weighted(0.7),
    )
        .prop_map(
            |(
                (mut detail_type, source, mut account),
                (event_name, mut recipient),
                (mut hosted_zone_id, id, mut response_id),
                detail_instead,
                parameters_instead,
                extra,
                huge,
                recipient_is_account,
            )| {
                if recipient_is_account && recipient.is_some() {
                    recipient.clone_from(&account);
                }
                if let Some((which, text)) = huge {
                    let text = Some(Value::String(text));
                    match which {
                        0 => account = text,
                        1 => recipient = text,
                        2 => hosted_zone_id = text,
                        3 => response_id = text,
                        _ => detail_type = text,
                    }
                }
                let mut parameters = serde_json::Map::new();
                put(&mut parameters, "hostedZoneId", hosted_zone_id);
                put(&mut parameters, "id", id);
                let mut detail = serde_json::Map::new();
                put(&mut detail, "eventName", event_name);
                put(&mut detail, "recipientAccountId", recipient);
                detail.insert(
                    "requestParameters".into(),
                    parameters_instead.unwrap_or(Value::Object(parameters)),
                );
                if let Some(id) = response_id {
                    detail.insert("responseElements".into(), json!({"hostedZone": {"id": id}}));
                }
                let mut event = serde_json::Map::new();
                event.insert("version".into(), json!("0"));
                put(&mut event, "detail-type", detail_type);
                put(&mut event, "source", source);
                put(&mut event, "account", account);
                event.insert(
                    "detail".into(),
                    detail_instead.unwrap_or(Value::Object(detail)),
                );
                if let Some((key, value)) = extra {
                    event.insert(key, value);
                }
                Value::Object(event)
            },
        )
        .boxed()
}

pub(super) fn put(map: &mut serde_json::Map<String, Value>, key: &str, value: Option<Value>) {
    if let Some(value) = value {
        map.insert(key.to_owned(), value);
    }
}

/// `{"dry_run": …, "force": …}`, each missing, a bool or anything, and now and then a key more.
pub(super) fn manual() -> BoxedStrategy<Value> {
    let flag = prop_oneof![
        1 => Just(None),
        4 => any::<bool>().prop_map(|b| Some(Value::Bool(b))),
        1 => json().prop_map(Some),
    ];
    (
        flag.clone(),
        flag,
        proptest::option::weighted(0.2, (key(), json())),
    )
        .prop_map(|(dry_run, force, extra)| {
            let mut object = serde_json::Map::new();
            put(&mut object, "dry_run", dry_run);
            put(&mut object, "force", force);
            if let Some((key, value)) = extra {
                object.insert(key, value);
            }
            Value::Object(object)
        })
        .boxed()
}

pub(super) fn generator_payload() -> BoxedStrategy<Value> {
    prop_oneof![
        6 => eventbridge(),
        1 => manual(),
        1 => json(),
        1 => (eventbridge(), vec(mutation(), 1..4)).prop_map(|(mut event, mutations)| {
            for m in &mutations {
                mutate(&mut event, m);
            }
            event
        }),
    ]
    .boxed()
}

/// The last `/`-separated part of a zone id, as the hint should carry it.
pub(super) fn bare_upper(raw: &str) -> String {
    raw.rsplit('/').next().unwrap_or(raw).to_ascii_uppercase()
}

pub(super) fn check_trigger(payload: &Value, tally: &Tally) -> Result<(), TestCaseError> {
    let detail_type = payload.get("detail-type").and_then(Value::as_str);
    let parsed = trigger::parse(payload);
    tally.add(
        match &parsed {
            Ok(Trigger::Schedule) => "schedule",
            Ok(Trigger::Manual { .. }) => "manual",
            Ok(Trigger::Route53(_)) => "zone hint",
            Err(TriggerError::Unrecognised { .. }) => "refused (shape)",
            Err(TriggerError::Route53 { .. }) => "refused (route53 field)",
            Err(TriggerError::Account { .. }) => "refused (another account)",
        },
        1,
    );
    match parsed {
        Ok(Trigger::Schedule) => prop_assert_eq!(detail_type, Some("Scheduled Event")),
        Ok(Trigger::Manual { dry_run, force }) => {
            let object = payload.as_object();
            prop_assert!(object.is_some());
            let object = object.unwrap();
            let account = |v: &Value| v.as_str().is_some_and(autoproxy::model::is_account_id);
            for (key, value) in object {
                let accepted = match key.as_str() {
                    "dry_run" => value.is_boolean(),
                    // `force` may also name accounts: one id, or a list of ids.
                    "force" => {
                        value.is_boolean()
                            || account(value)
                            || value
                                .as_array()
                                .is_some_and(|ids| !ids.is_empty() && ids.iter().all(account))
                    }
                    _ => false,
                };
                prop_assert!(accepted, "accepted {key:?}: {value}");
            }
            let flag = |name: &str| object.get(name).and_then(Value::as_bool).unwrap_or(false);
            prop_assert_eq!(dry_run, flag("dry_run"));
            let forced_all = force == publish::Force::All;
            prop_assert_eq!(forced_all, flag("force"));
        }
        Ok(Trigger::Route53(changes)) => {
            prop_assert_eq!(detail_type, Some("AWS API Call via CloudTrail"));
            prop_assert_eq!(payload["source"].as_str(), Some("aws.route53"));
            prop_assert_eq!(changes.events(), 1);
            prop_assert!(
                changes
                    .calls
                    .keys()
                    .all(|name| ROUTE53_EVENTS.contains(&name.as_str()))
            );
            prop_assert_eq!(changes.zones.len(), 1);
            let Some(zone) = changes.zones.first() else {
                return Err(TestCaseError::fail("no zone"));
            };
            let account = &zone.account;
            prop_assert!(
                account.len() == 12 && account.bytes().all(|b| b.is_ascii_digit()),
                "account {account:?} accepted"
            );
            let id = &zone.id;
            prop_assert!(
                !id.is_empty()
                    && id.len() <= 32
                    && id
                        .bytes()
                        .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit()),
                "zone id {id:?} accepted"
            );
            let detail = &payload["detail"];
            // The envelope's account, and a recipient, when named, that is the same.
            prop_assert_eq!(payload["account"].as_str(), Some(account.as_str()));
            prop_assert!(
                detail
                    .get("recipientAccountId")
                    .is_none_or(|recipient| recipient.as_str() == Some(account.as_str())),
                "account {account:?} is not the event's recipient"
            );
            let ids = [
                &detail["requestParameters"]["hostedZoneId"],
                &detail["requestParameters"]["id"],
                &detail["responseElements"]["hostedZone"]["id"],
            ];
            prop_assert!(
                ids.iter()
                    .filter_map(|v| v.as_str())
                    .any(|raw| bare_upper(raw) == *id),
                "zone id {id:?} is not the event's"
            );
        }
        Err(err) => {
            let message = err.to_string();
            prop_assert!(message.starts_with("expected "), "{message}");
            prop_assert!(message.contains("; got "), "{message}");
            prop_assert!(
                !message.contains('\n') && !message.contains('\r'),
                "a line break in {message:?}"
            );
            match err {
                TriggerError::Unrecognised { .. } => {
                    for shape in [
                        "\"Scheduled Event\"",
                        "AWS API Call via CloudTrail",
                        "dry_run",
                    ] {
                        prop_assert!(message.contains(shape), "{message}");
                    }
                }
                TriggerError::Route53 { expected, .. } => {
                    prop_assert!(message.contains(expected), "{message}");
                    prop_assert!(
                        ["12-digit account", "hosted zone id", "zone-changing calls"]
                            .iter()
                            .any(|what| expected.contains(what)),
                        "{message}"
                    );
                }
                TriggerError::Account { envelope, .. } => {
                    prop_assert_eq!(payload["account"].as_str(), Some(envelope.as_str()));
                    prop_assert!(
                        payload["detail"]["recipientAccountId"].as_str() != Some(&envelope),
                        "{message}"
                    );
                }
            }
        }
    }
    Ok(())
}

#[test]
pub(super) fn generator_events_are_accepted_only_when_well_formed() {
    let tally = Tally::default();
    let line = check_property("events→trigger", 2_000, generator_payload(), |payload| {
        check_trigger(&payload, &tally)
    });
    println!("{line}: {tally}");
    tally.require(&[
        "manual",
        "schedule",
        "zone hint",
        "refused (shape)",
        "refused (route53 field)",
    ]);
}
