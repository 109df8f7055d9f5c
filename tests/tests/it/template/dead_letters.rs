//! A member's dead messages never hide a function's failure: the events and the failed
//! invocations have dead-letter queues of their own, and each queue's alarm notifies on every
//! new arrival, also while an earlier message still waits there.
//!
//! The alarms are evaluated here as CloudWatch does, minute by minute, on the queue's metrics in
//! a scenario: a first message arrives and stays, a second arrives nine minutes later. A message
//! a redrive moves is not counted in `NumberOfMessagesSent` (AWS documents it); one an
//! on-failure destination or EventBridge sends is. Only the alarm shapes the template uses are
//! modelled; another shape fails the test, naming it.

use serde_json::{Value as Json, json};

use autoproxy_tests::cfn::Stack;

use super::stack::stack;
use super::template;

/// The stack, every queue's ARN and name its logical id.
fn deployed(template: &serde_yaml::Value) -> Stack {
    let mut stack = stack(template);
    for (name, resource) in template["Resources"].as_mapping().unwrap() {
        if resource["Type"].as_str() == Some("AWS::SQS::Queue") {
            let name = name.as_str().unwrap();
            stack
                .attributes
                .insert(format!("{name}.Arn"), name.to_owned());
            stack
                .attributes
                .insert(format!("{name}.QueueName"), name.to_owned());
        }
    }
    stack
}

const MINUTES: usize = 20;
const ARRIVALS: [usize; 2] = [3, 12];

/// How messages reach a dead-letter queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arrival {
    /// Moved by a queue's redrive: not counted as sent.
    Redrive,
    /// Sent (`SendMessage`): by Lambda's on-failure destination or EventBridge.
    Send,
}

/// A queue metric per minute in the scenario.
fn series(metric: &str, arrival: Arrival) -> Vec<f64> {
    (0..MINUTES)
        .map(|minute| match metric {
            "ApproximateNumberOfMessagesVisible" => {
                ARRIVALS.iter().filter(|at| **at <= minute).count() as f64
            }
            "NumberOfMessagesSent" if arrival == Arrival::Send => {
                f64::from(u8::from(ARRIVALS.contains(&minute)))
            }
            "NumberOfMessagesSent" => 0.0,
            other => panic!("no model of {other}"),
        })
        .collect()
}

/// One datapoint per minute: `stat` over the `period` seconds ending with that minute.
fn datapoints(minutes: &[f64], period: u64, stat: &str) -> Vec<f64> {
    let span = usize::try_from(period / 60).unwrap().max(1);
    (0..minutes.len())
        .map(|end| {
            let window = &minutes[end.saturating_sub(span - 1)..=end];
            match stat {
                "Sum" => window.iter().sum(),
                "Maximum" => window.iter().copied().fold(f64::MIN, f64::max),
                other => panic!("no model of statistic {other}"),
            }
        })
        .collect()
}

/// The alarm's datapoints, if it watches `queue`.
fn watched(alarm: &Json, queue: &str, arrival: Arrival) -> Option<Vec<f64>> {
    let on_queue =
        |dimensions: &Json| dimensions == &json!([{"Name": "QueueName", "Value": queue}]);
    if let Some(metric) = alarm["MetricName"].as_str() {
        if !on_queue(&alarm["Dimensions"]) {
            return None;
        }
        let period = alarm["Period"].as_u64().unwrap();
        let stat = alarm["Statistic"].as_str().unwrap();
        return Some(datapoints(&series(metric, arrival), period, stat));
    }
    let metrics = alarm["Metrics"].as_array()?;
    let stat = metrics.iter().find(|m| !m["MetricStat"].is_null())?;
    let metric = &stat["MetricStat"]["Metric"];
    if !on_queue(&metric["Dimensions"]) {
        return None;
    }
    let id = stat["Id"].as_str().unwrap();
    let values = datapoints(
        &series(metric["MetricName"].as_str().unwrap(), arrival),
        stat["MetricStat"]["Period"].as_u64().unwrap(),
        stat["MetricStat"]["Stat"].as_str().unwrap(),
    );
    let returned = metrics.iter().find(|m| m["ReturnData"] == json!(true))?;
    let expression = returned["Expression"].as_str().unwrap();
    if expression == format!("DIFF(FILL({id}, 0))") {
        // Before the first arrival the queue is empty (or has no data: filled with 0).
        let before = std::iter::once(0.0).chain(values.iter().copied());
        return Some(
            values
                .iter()
                .zip(before)
                .map(|(now, was)| now - was)
                .collect(),
        );
    }
    panic!("no model of the expression {expression}");
}

/// How many times the alarm goes into ALARM over the datapoints.
fn notifications(alarm: &Json, points: &[f64]) -> usize {
    let threshold = alarm["Threshold"].as_f64().unwrap();
    let periods = usize::try_from(alarm["EvaluationPeriods"].as_u64().unwrap()).unwrap();
    let needed = alarm["DatapointsToAlarm"]
        .as_u64()
        .map_or(periods, |n| usize::try_from(n).unwrap());
    let breaching = |value: f64| match alarm["ComparisonOperator"].as_str().unwrap() {
        "GreaterThanOrEqualToThreshold" => value >= threshold,
        "GreaterThanThreshold" => value > threshold,
        other => panic!("no model of {other}"),
    };
    let mut alarmed = false;
    let mut count = 0;
    for end in 0..points.len() {
        let window = &points[end.saturating_sub(periods - 1)..=end];
        let now = window.iter().filter(|v| breaching(**v)).count() >= needed;
        if now && !alarmed {
            count += 1;
        }
        alarmed = now;
    }
    count
}

/// Every queue a dead letter can land in, with how it lands there; the queues the functions'
/// failed invocations go to.
fn dead_letter_queues(
    template: &serde_yaml::Value,
    stack: &Stack,
) -> (Vec<(String, Arrival)>, Vec<String>) {
    let resources = template["Resources"].as_mapping().unwrap();
    let mut queues: Vec<(String, Arrival)> = Vec::new();
    let mut add = |queue: &Json, arrival: Arrival| {
        let queue = queue.as_str().unwrap().to_owned();
        match queues.iter_mut().find(|(q, _)| *q == queue) {
            // A queue that also takes redriven messages is tested with those: they are the
            // ones NumberOfMessagesSent misses.
            Some((_, kind)) if arrival == Arrival::Redrive => *kind = Arrival::Redrive,
            Some(_) => {}
            None => queues.push((queue, arrival)),
        }
    };
    let mut failed_invocations = Vec::new();
    for (_, resource) in resources {
        let properties = &resource["Properties"];
        let redrive = &properties["RedrivePolicy"]["deadLetterTargetArn"];
        if !redrive.is_null() {
            add(&stack.resolve(redrive).unwrap(), Arrival::Redrive);
        }
        for target in properties["Targets"].as_sequence().into_iter().flatten() {
            if !target["DeadLetterConfig"].is_null() {
                let arn = &target["DeadLetterConfig"]["Arn"];
                add(&stack.resolve(arn).unwrap(), Arrival::Send);
            }
        }
        let on_failure = &properties["EventInvokeConfig"]["DestinationConfig"]["OnFailure"];
        if !on_failure.is_null() {
            let queue = stack.resolve(&on_failure["Destination"]).unwrap();
            add(&queue, Arrival::Send);
            failed_invocations.push(queue.as_str().unwrap().to_owned());
        }
    }
    let redriven: Vec<&String> = queues
        .iter()
        .filter(|(_, arrival)| *arrival == Arrival::Redrive)
        .map(|(queue, _)| queue)
        .collect();
    assert!(
        !redriven.is_empty() && !failed_invocations.is_empty(),
        "{queues:?}"
    );
    (queues, failed_invocations)
}

#[test]
fn the_dead_letter_alarms_fire_on_a_second_message_while_a_first_is_still_there() {
    let template = template();
    let stack = deployed(&template);
    let (queues, failed_invocations) = dead_letter_queues(&template, &stack);
    let resources = template["Resources"].as_mapping().unwrap();
    for (queue, arrival) in &queues {
        let mut alarms = 0;
        for (name, resource) in resources {
            if resource["Type"].as_str() != Some("AWS::CloudWatch::Alarm") {
                continue;
            }
            // What the evaluation reads; the descriptions and actions are alarms.rs's.
            let mut properties = resource["Properties"].clone();
            for unread in ["AlarmDescription", "AlarmActions", "OKActions"] {
                properties.as_mapping_mut().unwrap().remove(unread);
            }
            // One naming what this stack does not know (a function's name) watches no queue;
            // an alarm of a queue that does not resolve leaves that queue unwatched below.
            let Ok(alarm) = stack.resolve(&properties) else {
                continue;
            };
            let Some(points) = watched(&alarm, queue, *arrival) else {
                continue;
            };
            alarms += 1;
            let name = name.as_str().unwrap();
            assert_eq!(
                notifications(&alarm, &points),
                ARRIVALS.len(),
                "{name} on {queue} ({arrival:?}) notified that often for {} arrivals at minutes \
                 {ARRIVALS:?}, the first message still there; datapoints {points:?}",
                ARRIVALS.len()
            );
        }
        assert!(
            alarms >= 1,
            "no alarm watches the dead-letter queue {queue}"
        );
    }
    for (queue, arrival) in &queues {
        assert!(
            *arrival == Arrival::Send || !failed_invocations.contains(queue),
            "{queue} takes both redriven events and the functions' failed invocations"
        );
    }
}
