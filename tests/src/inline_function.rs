//! A custom resource's inline Python function (`Code.ZipFile` in `template.yaml`) run with
//! python3 as Lambda runs it, its AWS clients stood in for by modules the test writes (moto runs
//! Lambda code only in Docker, and cannot hold the states the tests need). The stand-ins record
//! every call in `CALLS`; `cfnresponse` records the answer; `time.sleep` advances a clock that
//! the context's remaining time reads, so waits take no time.

use std::path::Path;
use std::process::Command;

use serde_json::{Value as Json, json};

/// `cfnresponse` as Lambda provides it to inline functions: the answer is recorded in
/// `RESPONSE` instead of PUT to the request's URL.
const CFNRESPONSE: &str = r#"
import json, os
SUCCESS, FAILED = "SUCCESS", "FAILED"
def send(event, context, status, data, physical, reason=None):
    with open(os.environ["RESPONSE"], "w") as f:
        json.dump({"Status": status, "Data": data, "PhysicalResourceId": physical, "Reason": reason}, f)
"#;

/// Helpers every stand-in may import (`from recorder import log, ClientError, S`).
const RECORDER: &str = r#"
import json, os
S = json.load(open(os.environ["SCENARIO"]))

class ClientError(Exception):
    def __init__(self, code, message):
        super().__init__("An error occurred (%s): %s" % (code, message))
        self.response = {"Error": {"Code": code, "Message": message}}

def log(name, kw):
    with open(os.environ["CALLS"], "a") as f:
        f.write(json.dumps([name, kw], default=str) + "\n")
"#;

/// Runs `event` through the handler, with `budget_seconds` of Lambda time.
const DRIVER: &str = r#"
import json, sys, time
clock = [0.0]
time.sleep = lambda s: clock.__setitem__(0, clock[0] + s)
import index
budget = float(sys.argv[2])
class Context:
    def get_remaining_time_in_millis(self):
        return int((budget - clock[0]) * 1000)
index.handler(json.loads(sys.argv[1]), Context())
"#;

/// What one run did: the calls in order (`[name, arguments]`), the answer CloudFormation got,
/// and what the function printed (its CloudWatch log).
#[derive(Debug, Clone)]
pub struct Run {
    pub calls: Vec<(String, Json)>,
    pub response: Json,
    pub log: String,
}

impl Run {
    pub fn names(&self) -> Vec<&str> {
        self.calls.iter().map(|(name, _)| name.as_str()).collect()
    }

    pub fn status(&self) -> &str {
        self.response["Status"].as_str().unwrap_or_default()
    }

    pub fn reason(&self) -> &str {
        self.response["Reason"].as_str().unwrap_or_default()
    }
}

/// The inline code of `resource` in `template.yaml`.
pub fn code(resource: &str) -> String {
    let template = crate::user_data::template();
    template["Resources"][resource]["Properties"]["Code"]["ZipFile"]
        .as_str()
        .unwrap_or_else(|| panic!("{resource} has no inline code"))
        .to_owned()
}

fn write(dir: &Path, name: &str, text: &str) {
    if let Some(parent) = dir.join(name).parent() {
        std::fs::create_dir_all(parent).unwrap_or_else(|err| panic!("mkdir for {name}: {err}"));
    }
    std::fs::write(dir.join(name), text).unwrap_or_else(|err| panic!("write {name}: {err}"));
}

/// Runs `resource`'s function on `event` with the stand-in modules `modules` (file name, text),
/// under `scenario` (what the stand-ins answer, as `recorder.S`), with `budget_seconds` of time.
pub fn run(
    resource: &str,
    modules: &[(&str, &str)],
    event: &Json,
    scenario: &Json,
    budget_seconds: u32,
) -> Run {
    let dir = tempfile::tempdir().expect("a directory for the function");
    write(dir.path(), "index.py", &code(resource));
    write(dir.path(), "cfnresponse.py", CFNRESPONSE);
    write(dir.path(), "recorder.py", RECORDER);
    for (name, text) in modules {
        write(dir.path(), name, text);
    }
    write(dir.path(), "scenario.json", &scenario.to_string());
    let out = Command::new("python3")
        .arg("-c")
        .arg(DRIVER)
        .arg(event.to_string())
        .arg(budget_seconds.to_string())
        .current_dir(dir.path())
        .env("PYTHONPATH", dir.path())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("SCENARIO", dir.path().join("scenario.json"))
        .env("CALLS", dir.path().join("calls"))
        .env("RESPONSE", dir.path().join("response.json"))
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "the function raised: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let calls = std::fs::read_to_string(dir.path().join("calls")).unwrap_or_default();
    let response = std::fs::read_to_string(dir.path().join("response.json"))
        .expect("the function answered CloudFormation");
    Run {
        calls: calls
            .lines()
            .map(|line| serde_json::from_str(line).expect("a recorded call"))
            .collect(),
        response: serde_json::from_str(&response).expect("the answer is JSON"),
        log: String::from_utf8_lossy(&out.stdout).into_owned(),
    }
}

/// A custom resource request of `kind` with these properties (and the old ones, for an update).
pub fn request(kind: &str, properties: &Json, old: &Json) -> Json {
    json!({
        "RequestType": kind,
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/autoproxy/0f1e",
        "RequestId": "0f1e2d3c",
        "LogicalResourceId": "Resource",
        "PhysicalResourceId": "resource-1",
        "ResourceProperties": properties,
        "OldResourceProperties": old,
    })
}
