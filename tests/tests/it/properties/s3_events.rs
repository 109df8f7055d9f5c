//! S3 events → dispatch: which config versions a configure invocation rolls out.

use super::*;

/// An S3 event record and, when every field is well formed, what `dispatches` must make of it.
#[derive(Debug, Clone)]
pub(super) struct S3Record {
    pub(super) value: Value,
    /// `Some(Some(version))`: dispatch this version; `Some(None)`: ignore; `None`: unknown.
    pub(super) expected: Option<Option<String>>,
}

/// The config key as S3 may encode it (true), or another key (false).
pub(super) fn object_key() -> BoxedStrategy<(String, bool)> {
    let encoded: String = CONFIG_KEY.bytes().map(|b| format!("%{b:02X}")).collect();
    prop_oneof![
        3 => Just((CONFIG_KEY.to_owned(), true)),
        1 => select(vec![
            "haproxy%2Fhaproxy.cfg", "haproxy%2fhaproxy%2ecfg", "%68aproxy/haproxy.cfg",
        ])
        .prop_map(|k| (k.to_owned(), true)),
        1 => Just((encoded, true)),
        2 => select(vec![
            "haproxy/haproxy.manifest.json", "haproxy/haproxy.cfg.tmp", "haproxy/haproxy+cfg",
            "haproxy/haproxy.cfg%00", "HAPROXY/haproxy.cfg", "haproxy/haproxy.fleet/i-1.json",
            "%zz", "%ff%fe", "haproxy/haproxy.cfg ", "",
        ])
        .prop_map(|k| (k.to_owned(), false)),
    ]
    .boxed()
}

pub(super) fn s3_record() -> BoxedStrategy<S3Record> {
    let well_formed = (
        select(vec![
            "ObjectCreated:Put",
            "ObjectCreated:CompleteMultipartUpload",
            "ObjectCreated:Copy",
            "ObjectRemoved:Delete",
            "ObjectRemoved:DeleteMarkerCreated",
        ]),
        object_key(),
        re("[A-Za-z0-9._]{1,32}"),
    )
        .prop_map(|(event_name, (key, is_config), version)| {
            let value = json!({
                "eventVersion": "2.1", "eventSource": "aws:s3", "awsRegion": "us-east-1",
                "eventTime": "2026-11-23T03:14:03.000Z", "eventName": event_name,
                "userIdentity": {"principalId": "AWS:AROAEXAMPLE"},
                "requestParameters": {"sourceIPAddress": "10.0.0.1"}, "responseElements": {},
                "s3": {"s3SchemaVersion": "1.0", "configurationId": "autoproxy",
                       "bucket": {"name": "config-bucket", "arn": "arn:aws:s3:::config-bucket"},
                       "object": {"key": key, "size": 20, "versionId": version, "sequencer": "0A"}}
            });
            let created = event_name.starts_with("ObjectCreated:");
            S3Record {
                value,
                expected: Some((created && is_config).then_some(version)),
            }
        })
        .boxed();
    prop_oneof![
        3 => well_formed.clone(),
        2 => (well_formed.clone(), s3_edge()).prop_map(|(mut record, (path, new))| {
            let (last, parent) = path.split_last().unwrap();
            let steps: Vec<Step> = parent.iter().map(|k| Step::Key((*k).to_owned())).collect();
            if let Some(Value::Object(map)) = node_mut(&mut record.value, &steps) {
                match new {
                    Some(new) => map.insert((*last).to_owned(), new),
                    None => map.remove(*last),
                };
            }
            S3Record { value: record.value, expected: None }
        }),
        2 => (well_formed, vec(mutation(), 1..3)).prop_map(|(mut record, mutations)| {
            for m in &mutations {
                mutate(&mut record.value, m);
            }
            S3Record { value: record.value, expected: None }
        }),
        1 => json().prop_map(|value| S3Record { value, expected: None }),
    ]
    .boxed()
}

/// One field of an S3 record at an edge: missing (`None`), null, empty, of another type or
/// almost right.
pub(super) fn s3_edge() -> BoxedStrategy<(Vec<&'static str>, Option<Value>)> {
    let edges = |path: &[&'static str], values: Vec<Option<Value>>| {
        let path = path.to_vec();
        select(values).prop_map(move |value| (path.clone(), value))
    };
    prop_oneof![
        edges(
            &["s3", "object", "versionId"],
            vec![
                None,
                Some(json!(null)),
                Some(json!("")),
                Some(json!(7)),
                Some(json!([]))
            ]
        ),
        edges(
            &["eventName"],
            vec![
                None,
                Some(json!(null)),
                Some(json!("ObjectCreated")),
                Some(json!("objectcreated:put")),
                Some(json!("ObjectCreated:*")),
                Some(json!(1))
            ]
        ),
        edges(
            &["s3", "object", "key"],
            vec![
                None,
                Some(json!(null)),
                Some(json!("")),
                Some(json!("haproxy/haproxy.cfg\u{0}")),
                Some(json!(["haproxy/haproxy.cfg"]))
            ]
        ),
        edges(
            &["s3", "bucket", "name"],
            vec![None, Some(json!(null)), Some(json!("")), Some(json!({}))]
        ),
        edges(
            &["eventTime"],
            vec![
                None,
                Some(json!("yesterday")),
                Some(json!(0)),
                Some(json!(null))
            ]
        ),
        edges(&["s3"], vec![None, Some(json!(null)), Some(json!({}))]),
        edges(&["userIdentity"], vec![None, Some(json!("x"))]),
        edges(
            &["responseElements"],
            vec![None, Some(json!(null)), Some(json!({"x": 1}))]
        ),
    ]
    .boxed()
}

/// An invocation payload of the configure function and, when known, the dispatches it holds
/// (the versions, in order, duplicates dropped) and how many keys it ignores.
#[derive(Debug, Clone)]
pub(super) struct S3Case {
    pub(super) payload: Value,
    pub(super) expected: Option<(Vec<String>, usize)>,
}

pub(super) fn configure_payload() -> BoxedStrategy<S3Case> {
    let unknown = |payload| S3Case {
        payload,
        expected: None,
    };
    prop_oneof![
        6 => vec(s3_record(), 1..4).prop_map(|records| {
            let expected = records
                .iter()
                .map(|r| r.expected.clone())
                .collect::<Option<Vec<_>>>()
                .map(|outcomes| {
                    let mut versions: Vec<String> = Vec::new();
                    let mut ignored = 0;
                    for outcome in outcomes {
                        match outcome {
                            Some(v) if !versions.contains(&v) => versions.push(v),
                            Some(_) => {}
                            None => ignored += 1,
                        }
                    }
                    (versions, ignored)
                });
            let records: Vec<Value> = records.into_iter().map(|r| r.value).collect();
            let payload = json!({ "Records": records });
            S3Case { payload, expected }
        }),
        1 => Just(unknown(json!({"Records": []}))),
        1 => Just(unknown(json!({"fleet": true}))),
        1 => json().prop_map(move |v| unknown(json!({"fleet": v}))),
        1 => (key(), json()).prop_map(move |(k, v)| {
            let mut object = serde_json::Map::new();
            object.insert("fleet".into(), Value::Bool(true));
            object.insert(k, v);
            unknown(Value::Object(object))
        }),
        1 => json().prop_map(move |v| unknown(json!({"Records": v}))),
        1 => json().prop_map(unknown),
    ]
    .boxed()
}

pub(super) fn check_dispatch(case: &S3Case, tally: &Tally) -> Result<(), TestCaseError> {
    let payload = &case.payload;
    let fleet = is_fleet_request(payload);
    tally.add("fleet", usize::from(fleet));
    prop_assert_eq!(fleet, *payload == json!({"fleet": true}));
    let result = dispatches(payload, CONFIG_KEY);
    match &result {
        Ok((wanted, ignored)) => {
            tally.add("dispatched", wanted.len());
            tally.add("ignored", ignored.len());
        }
        Err(_) => tally.add("refused", 1),
    }
    match result {
        Ok((wanted, ignored)) => {
            let records = payload["Records"].as_array().map_or(0, Vec::len);
            prop_assert!(records > 0, "accepted without records: {payload}");
            prop_assert!(wanted.len() + ignored.len() <= records);
            for (index, dispatch) in wanted.iter().enumerate() {
                prop_assert_eq!(dispatch.key.as_str(), CONFIG_KEY);
                prop_assert!(!dispatch.version_id.is_empty());
                prop_assert!(!wanted[..index].contains(dispatch), "dispatched twice");
            }
            if let Some((versions, ignored_count)) = &case.expected {
                let expected: Vec<Dispatch> = versions
                    .iter()
                    .map(|version| Dispatch {
                        bucket: "config-bucket".into(),
                        key: CONFIG_KEY.into(),
                        version_id: version.clone(),
                    })
                    .collect();
                prop_assert_eq!(&wanted, &expected);
                prop_assert_eq!(ignored.len(), *ignored_count);
            }
        }
        Err(err) => {
            prop_assert!(
                case.expected.is_none(),
                "a well-formed event refused: {err}"
            );
            let message = err.to_string();
            prop_assert!(
                message.starts_with("expected an S3 event notification"),
                "{message}"
            );
            prop_assert!(message.contains("{\"fleet\": true}"), "{message}");
            prop_assert!(message.ends_with("nothing was sent"), "{message}");
            prop_assert!(!message.contains('\n'), "a line break in {message:?}");
            // The payload is echoed cut to 300 bytes.
            prop_assert!(message.len() < 600, "{} bytes", message.len());
        }
    }
    Ok(())
}

#[test]
pub(super) fn configure_payloads_dispatch_only_the_config_key() {
    let tally = Tally::default();
    let line = check_property("s3 event→dispatch", 2_000, configure_payload(), |case| {
        check_dispatch(&case, &tally)
    });
    println!("{line}: {tally}");
    tally.require(&["dispatched", "fleet", "ignored", "refused"]);
}
