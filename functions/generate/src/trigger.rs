//! What started a run (docs/ARCHITECTURE.md, "Generator events"). A CloudTrail event is only a
//! hint of which zone changed: its payload echoes the caller's request and is never applied.

use std::collections::{BTreeMap, BTreeSet};

use autoproxy::model::{ZoneKey, is_account_id, is_zone_id};
use autoproxy::publish::Force;
use autoproxy::route53::bare_zone_id;
use autoproxy::{QUOTED_CHARS, excerpt};
use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use serde::Deserialize;
use serde_json::Value;

/// The Route53 calls whose CloudTrail events re-read a zone.
pub const ROUTE53_EVENTS: &[&str] = &[
    "ChangeResourceRecordSets",
    "CreateHostedZone",
    "DeleteHostedZone",
    "AssociateVPCWithHostedZone",
    "DisassociateVPCFromHostedZone",
];

/// What started a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trigger {
    /// EventBridge schedule: full reconciliation.
    Schedule,
    /// Route53 changes: re-read the zones they name. A queue's batch of CloudTrail events (the
    /// stack's path), or one such event invoked directly: by hand only, since the stack's rule
    /// sends every event to the queue.
    Route53(Changes),
    /// `cargo lambda invoke` or a console test: full reconciliation.
    Manual { dry_run: bool, force: Force },
}

impl Trigger {
    /// The name in the summary and the config header.
    pub fn label(&self) -> String {
        match self {
            Trigger::Schedule => "schedule".to_owned(),
            Trigger::Route53(changes) => changes.label(),
            Trigger::Manual { dry_run: true, .. } => "manual-dry-run".to_owned(),
            Trigger::Manual { .. } => "manual".to_owned(),
        }
    }

    pub fn dry_run(&self) -> bool {
        matches!(self, Trigger::Manual { dry_run: true, .. })
    }

    pub fn force(&self) -> Force {
        match self {
            Trigger::Manual { force, .. } => force.clone(),
            _ => Force::None,
        }
    }
}

/// What Route53 events name: the calls made, and the zones to read again. A CloudTrail event
/// names one zone; a batch of them names each zone once, however many events name it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// Each call's name, and how many events made it.
    pub calls: BTreeMap<String, usize>,
    pub zones: BTreeSet<ZoneKey>,
}

impl Changes {
    pub fn one(event_name: &str, zone: ZoneKey) -> Changes {
        Changes {
            calls: BTreeMap::from([(event_name.to_owned(), 1)]),
            zones: BTreeSet::from([zone]),
        }
    }

    /// Adds another event's (or batch's) changes.
    pub fn add(&mut self, other: Changes) {
        for (call, count) in other.calls {
            *self.calls.entry(call).or_default() += count;
        }
        self.zones.extend(other.zones);
    }

    /// How many events these are.
    pub fn events(&self) -> usize {
        self.calls.values().sum()
    }

    /// `route53:` and the calls' names (one event: its call, as it has always been named).
    /// Bounded: there are five such calls.
    fn label(&self) -> String {
        let names: Vec<&str> = self.calls.keys().map(String::as_str).collect();
        format!("route53:{}", names.join("+"))
    }
}

/// A payload that is none of the accepted shapes. Nothing is read or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TriggerError {
    #[error(
        "expected an EventBridge \"Scheduled Event\", an EventBridge \"AWS API Call via \
         CloudTrail\" event from aws.route53 ({}), or a manual object {{\"dry_run\": bool, \
         \"force\": bool, an account id or a list of account ids}} (both optional), or {{\"explain\": \"<name>\"}}; got {got}",
        ROUTE53_EVENTS.join(", ")
    )]
    Unrecognised { got: String },
    #[error("expected a Route53 CloudTrail event {expected}; got {got}")]
    Route53 { expected: &'static str, got: String },
    #[error(
        "expected a Route53 CloudTrail event whose detail.recipientAccountId is its envelope's \
         account {envelope}; got recipientAccountId {recipient}: refused, the schedule reads \
         the account's zones"
    )]
    Account { envelope: String, recipient: String },
}

/// One EventBridge event as a Route53 change: what a queued message's body must be.
pub fn route53_change(event: &Value) -> Result<Changes, TriggerError> {
    match parse(event)? {
        Trigger::Route53(changes) => Ok(changes),
        _ => Err(TriggerError::Route53 {
            expected: "(a queued message holds only Route53 events)",
            got: excerpt(&event.to_string(), QUOTED_CHARS),
        }),
    }
}

/// Classifies a run's payload: with `detail-type`, an EventBridge event, whose envelope is
/// read as `aws_lambda_events`' `EventBridgeEvent` (a `detail-type`, `source` and `detail`
/// required, each other field of the type EventBridge sends); without, a manual object.
pub fn parse(event: &Value) -> Result<Trigger, TriggerError> {
    let Some(object) = event.as_object() else {
        return Err(unrecognised(event));
    };
    if !object.contains_key("detail-type") {
        return manual(object).ok_or_else(|| unrecognised(event));
    }
    let envelope =
        EventBridgeEvent::<Value>::deserialize(event).map_err(|_| unrecognised(event))?;
    match (envelope.detail_type.as_str(), envelope.source.as_str()) {
        ("Scheduled Event", _) => Ok(Trigger::Schedule),
        ("AWS API Call via CloudTrail", "aws.route53") => route53(&envelope),
        _ => Err(unrecognised(event)),
    }
}

fn manual(object: &serde_json::Map<String, Value>) -> Option<Trigger> {
    let mut dry_run = false;
    let mut force = Force::None;
    for (key, value) in object {
        match (key.as_str(), value) {
            ("dry_run", Value::Bool(b)) => dry_run = *b,
            ("force", value) => force = forced(value)?,
            _ => return None,
        }
    }
    Some(Trigger::Manual { dry_run, force })
}

/// `force`: `true` releases every held change; an account id, or a list of them, releases
/// only those accounts'.
fn forced(value: &Value) -> Option<Force> {
    let ids: Vec<&str> = match value {
        Value::Bool(true) => return Some(Force::All),
        Value::Bool(false) => return Some(Force::None),
        Value::String(id) => vec![id.as_str()],
        Value::Array(items) if !items.is_empty() => {
            items.iter().map(Value::as_str).collect::<Option<_>>()?
        }
        _ => return None,
    };
    ids.iter()
        .all(|id| is_account_id(id))
        .then(|| Force::Accounts(ids.iter().map(|id| (*id).to_owned()).collect()))
}

/// A Route53 call's CloudTrail event: `detail` is CloudTrail's record, read field by field
/// (only the call's name, the zone id and the recipient).
fn route53(event: &EventBridgeEvent) -> Result<Trigger, TriggerError> {
    let detail = &event.detail;
    let event_name = detail["eventName"].as_str().unwrap_or_default();
    if !ROUTE53_EVENTS.contains(&event_name) {
        return Err(TriggerError::Route53 {
            expected: "for one of the zone-changing calls",
            got: format!("eventName {}", quoted(event_name)),
        });
    }
    let account = envelope_account(event)?;
    let raw_id = [
        &detail["requestParameters"]["hostedZoneId"],
        &detail["requestParameters"]["id"],
        &detail["responseElements"]["hostedZone"]["id"],
    ]
    .into_iter()
    .find_map(Value::as_str)
    .unwrap_or_default();
    let id = bare_zone_id(raw_id).to_ascii_uppercase();
    if !is_zone_id(&id) {
        return Err(TriggerError::Route53 {
            expected: "naming a hosted zone id",
            got: quoted(raw_id),
        });
    }
    let zone = ZoneKey {
        account: account.to_owned(),
        id,
    };
    Ok(Trigger::Route53(Changes::one(event_name, zone)))
}

/// The account that owns the zone: the envelope's `account`, which EventBridge sets to where
/// the call was made (a forwarded event keeps it) and no caller writes. `detail` is CloudTrail's
/// record as delivered; a `recipientAccountId` that names another account refuses the event,
/// so that no event sends a read into an account it did not come from.
fn envelope_account(event: &EventBridgeEvent) -> Result<&str, TriggerError> {
    let account = event.account.as_deref().unwrap_or_default();
    if !is_account_id(account) {
        return Err(TriggerError::Route53 {
            expected: "whose envelope names a 12-digit account",
            got: quoted(account),
        });
    }
    match event.detail.get("recipientAccountId") {
        None => Ok(account),
        Some(Value::String(recipient)) if recipient == account => Ok(account),
        Some(recipient) => Err(TriggerError::Account {
            envelope: account.to_owned(),
            recipient: excerpt(&recipient.to_string(), QUOTED_CHARS),
        }),
    }
}

fn unrecognised(event: &Value) -> TriggerError {
    TriggerError::Unrecognised {
        got: excerpt(&event.to_string(), QUOTED_CHARS),
    }
}

/// A refused field, quoted and cut to [`QUOTED_CHARS`]: an error must not carry a 200 kB value.
fn quoted(field: &str) -> String {
    excerpt(&format!("{field:?}"), QUOTED_CHARS)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// A sample event of `events/`.
    pub(crate) fn event_file(name: &str) -> Value {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../events/");
        let text = std::fs::read_to_string(format!("{path}{name}")).unwrap();
        serde_json::from_str(&text).unwrap()
    }

    #[test]
    fn sample_events_parse() {
        assert_eq!(parse(&event_file("schedule.json")), Ok(Trigger::Schedule));
        assert_eq!(
            parse(&event_file("manual-dry-run.json")),
            Ok(Trigger::Manual {
                dry_run: true,
                force: Force::None
            })
        );
        let zone = |id: &str| ZoneKey {
            account: "123456789012".into(),
            id: id.into(),
        };
        assert_eq!(
            parse(&event_file("change-resource-record-sets.json")),
            Ok(Trigger::Route53(Changes::one(
                "ChangeResourceRecordSets",
                zone("Z0123456789ABCDEFGHIJ")
            )))
        );
        assert_eq!(
            parse(&event_file("create-hosted-zone.json")),
            Ok(Trigger::Route53(Changes::one(
                "CreateHostedZone",
                zone("Z0NEWZONE0000000000001")
            )))
        );
        assert_eq!(
            parse(&event_file("delete-hosted-zone.json")),
            Ok(Trigger::Route53(Changes::one(
                "DeleteHostedZone",
                zone("Z0123456789ABCDEFGHIJ")
            )))
        );
    }

    /// Route53's events exist only in us-east-1; a stack elsewhere hears them forwarded from
    /// there (docs/member-account.yaml, docs/central-forwarding.yaml). EventBridge delivers them
    /// unchanged: `account` the account that made the call, `region` us-east-1, whichever region
    /// the function runs in. The trigger reads the zone and its account from the event alone.
    #[test]
    fn forwarded_events_hint_the_zone_a_local_one_does() {
        let forwarded = event_file("forwarded-change-resource-record-sets.json");
        assert_eq!(forwarded["region"], "us-east-1");
        assert_eq!(
            parse(&forwarded),
            Ok(Trigger::Route53(Changes::one(
                "ChangeResourceRecordSets",
                ZoneKey {
                    account: "111111111111".into(),
                    id: "Z0FORWARDED0000000001".into(),
                }
            )))
        );
        // The central account's own event, forwarded: the local sample, unchanged.
        let local = event_file("change-resource-record-sets.json");
        for region in ["us-east-1", "eu-west-1"] {
            let mut delivered = local.clone();
            delivered["region"] = json!(region);
            assert_eq!(parse(&delivered), parse(&local), "{region}");
        }
        // Every sample as a member's event forwarded: the same call, the same zone id, in the
        // member's account.
        for name in [
            "change-resource-record-sets.json",
            "create-hosted-zone.json",
            "delete-hosted-zone.json",
        ] {
            let local = event_file(name);
            let mut member = local.clone();
            member["account"] = json!("111111111111");
            member["detail"]["recipientAccountId"] = json!("111111111111");
            member["detail"]["userIdentity"]["accountId"] = json!("111111111111");
            let (Ok(member), Ok(local)) = (route53_change(&member), route53_change(&local)) else {
                panic!("{name}: not a Route53 trigger");
            };
            assert_eq!(member.calls, local.calls, "{name}");
            let (Some(zone), Some(local_zone)) = (member.zones.first(), local.zones.first()) else {
                panic!("{name}: no zone");
            };
            assert_eq!(zone.id, local_zone.id, "{name}");
            assert_eq!(zone.account, "111111111111", "{name}");
        }
        // The account is the zone's owner, the call's recipient, whatever bus delivered it.
        let mut without_recipient = forwarded.clone();
        without_recipient["detail"]
            .as_object_mut()
            .map(|detail| detail.remove("recipientAccountId"));
        assert_eq!(parse(&without_recipient), parse(&forwarded));
    }

    /// The account a change is read in is the envelope's, which EventBridge sets and no caller
    /// writes; `detail` echoes CloudTrail's record, and a `recipientAccountId` that names another
    /// account refuses the event rather than sending a read to that account.
    #[test]
    fn an_events_account_is_the_envelopes() {
        let forwarded = event_file("forwarded-change-resource-record-sets.json");
        let mut other = forwarded.clone();
        other["detail"]["recipientAccountId"] = json!("222222222222");
        let err = parse(&other).unwrap_err();
        assert!(matches!(err, TriggerError::Account { .. }), "{err:?}");
        let text = err.to_string();
        assert!(
            text.contains("111111111111") && text.contains("222222222222"),
            "{text}"
        );
        // Not a string, or not an account id: refused the same way.
        for recipient in [json!(111111111111_u64), json!("1111111111111"), json!(null)] {
            let mut odd = forwarded.clone();
            odd["detail"]["recipientAccountId"] = recipient.clone();
            assert!(
                matches!(parse(&odd), Err(TriggerError::Account { .. })),
                "{recipient}"
            );
        }
        // The envelope must name an account itself: the detail's never stands in for it.
        let mut bare = forwarded.clone();
        bare.as_object_mut().map(|event| event.remove("account"));
        assert!(matches!(parse(&bare), Err(TriggerError::Route53 { .. })));
    }

    #[test]
    fn manual_payloads() {
        let accounts =
            |ids: &[&str]| Force::Accounts(ids.iter().map(|id| (*id).to_owned()).collect());
        let cases = [
            (json!({}), Some((false, Force::None))),
            (json!({"force": true}), Some((false, Force::All))),
            (
                json!({"dry_run": false, "force": true}),
                Some((false, Force::All)),
            ),
            (
                json!({"force": "111111111111"}),
                Some((false, accounts(&["111111111111"]))),
            ),
            (
                json!({"dry_run": true, "force": ["222222222222", "111111111111"]}),
                Some((true, accounts(&["111111111111", "222222222222"]))),
            ),
            (json!({"force": "11111111111"}), None),
            (json!({"force": ["111111111111", "all"]}), None),
            (json!({"force": []}), None),
            (json!({"force": 1}), None),
            (json!({"dry_run": "yes"}), None),
            (json!({"dryrun": true}), None),
            (json!([]), None),
            (json!(null), None),
        ];
        for (payload, expected) in cases {
            let got = parse(&payload).ok();
            let expected = expected.map(|(dry_run, force)| Trigger::Manual { dry_run, force });
            assert_eq!(got, expected, "{payload}");
        }
    }

    #[test]
    fn anything_else_names_the_accepted_shapes() {
        let err = parse(&json!({"Records": [{"s3": {}}]}))
            .unwrap_err()
            .to_string();
        assert!(err.contains("Scheduled Event"), "{err}");
        assert!(err.contains("dry_run"), "{err}");
        assert!(err.contains("Records"), "{err}");
        let err = parse(&json!({"detail-type": "EC2 Instance State-change Notification"}));
        assert!(matches!(err, Err(TriggerError::Unrecognised { .. })));
    }

    #[test]
    fn route53_hints_are_validated_not_trusted() {
        let mut event = event_file("change-resource-record-sets.json");
        event["detail"]["requestParameters"]["hostedZoneId"] = json!("Z1; rm -rf /");
        assert!(matches!(parse(&event), Err(TriggerError::Route53 { .. })));
        let mut event = event_file("change-resource-record-sets.json");
        event["detail"]["eventName"] = json!("ListHostedZones");
        assert!(matches!(parse(&event), Err(TriggerError::Route53 { .. })));
        let mut event = event_file("change-resource-record-sets.json");
        event["detail"]["requestParameters"]["hostedZoneId"] = json!("/hostedzone/z0abc");
        let changes = route53_change(&event).unwrap();
        assert!(changes.zones.iter().all(|zone| zone.id == "Z0ABC"));
        // A huge field is quoted, not carried whole into the error.
        let mut event = event_file("change-resource-record-sets.json");
        event["detail"]["requestParameters"]["hostedZoneId"] = json!("Z".repeat(100_000) + "!");
        let err = parse(&event).unwrap_err().to_string();
        assert!(
            err.len() < 400 && err.contains("ZZZ…"),
            "{} bytes",
            err.len()
        );
    }
}
