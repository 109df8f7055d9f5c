"""EventBridge rules and events on a moto server, for tests: creates SQS queues, puts rules
(their patterns and targets as given, in the account and region given) on the default buses,
puts events, and answers what each queue received.

moto 5.2.5 answers TestEventPattern with an empty body (not implemented), so patterns are tested
by moto's own rule matching: the events are put, and the queues show which rules took them. A
rule whose target is another account's or region's default bus puts the matched event there
(moto stamps it with that bus's account and region, and drops `resources`, where EventBridge
keeps the original ones; moto checks neither the bus policy nor the target's role).

Usage: python eventbridge.py <moto endpoint>  < plan.json  > received.json
  plan:     {"queues": [{"account", "region", "name"}],
             "rules":  [{"account", "region", "name", "pattern": {...}, "targets": [{...}]}],
             "events": [{"account", "region", "entry": {PutEvents entry}}]}
  received: {"<queue name>": [event, ...]}   (each event as the queue's message body holds it)
An account other than moto's own (123456789012) is acted in through an assumed role.
Runs with the moto venv's Python (boto3). Exits non-zero, saying why, when a call fails or an
event is refused.
"""

import json
import sys

import boto3

MOTO = sys.argv[1]
OWN_ACCOUNT = "123456789012"
CLIENTS = {}


def client(service, account, region):
    """A client acting in `account`, in `region`."""
    key = (service, account, region)
    if key not in CLIENTS:
        kwargs = dict(
            endpoint_url=MOTO,
            region_name=region,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        if account != OWN_ACCOUNT:
            credentials = boto3.client("sts", **kwargs).assume_role(
                RoleArn=f"arn:aws:iam::{account}:role/autoproxy-test",
                RoleSessionName="eventbridge-test",
            )["Credentials"]
            kwargs.update(
                aws_access_key_id=credentials["AccessKeyId"],
                aws_secret_access_key=credentials["SecretAccessKey"],
                aws_session_token=credentials["SessionToken"],
            )
        CLIENTS[key] = boto3.client(service, **kwargs)
    return CLIENTS[key]


def main():
    plan = json.load(sys.stdin)
    queues = {}
    for queue in plan.get("queues", []):
        sqs = client("sqs", queue["account"], queue["region"])
        queues[queue["name"]] = (sqs, sqs.create_queue(QueueName=queue["name"])["QueueUrl"])
    for rule in plan.get("rules", []):
        events = client("events", rule["account"], rule["region"])
        events.put_rule(Name=rule["name"], EventPattern=json.dumps(rule["pattern"]))
        events.put_targets(Rule=rule["name"], Targets=rule["targets"])
    for event in plan.get("events", []):
        events = client("events", event["account"], event["region"])
        answer = events.put_events(Entries=[event["entry"]])
        if answer.get("FailedEntryCount"):
            sys.exit(f"PutEvents refused {event}: {answer['Entries']}")
    received = {}
    for name, (sqs, url) in queues.items():
        bodies = received.setdefault(name, [])
        while True:
            messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
            if not messages:
                break
            for message in messages:
                bodies.append(json.loads(message["Body"]))
                sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    json.dump(received, sys.stdout)


if __name__ == "__main__":
    main()
