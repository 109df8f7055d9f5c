//! The proxies' user data (`ProxyLaunchTemplate` in `template.yaml`, `ProxyFleet=create`) as a
//! deploy resolves it, run for real on a host like an instance: in a private mount namespace
//! whose `/run/haproxy` is the test HAProxy's directory (where the bootstrap config's stats
//! socket goes, as on an instance), and whose `/dev/console` is a file the test reads, with the
//! `systemctl` stand-in first on PATH. HAProxy is installed on this machine and the stand-in for
//! the SSM agent is on PATH, so the script's own "already installed" checks skip both package
//! installs; a `curl` stand-in answers the script's check of its way out (every host reachable
//! unless the test cuts some off: this machine has no way out); everything else runs as written.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::json;

use crate::cfn::Stack;
use crate::moto::{OWN_ACCOUNT, REGION};
use crate::proxy::{Haproxy, HaproxyFiles};
use crate::systemctl::Systemctl;

const STACK_ID: &str = "arn:aws:cloudformation:us-east-1:123456789012:stack/autoproxy/0f1e2d3c-aaaa-bbbb-cccc-0123456789ab";

/// Where the bootstrap config puts its stats socket (as the generated configs do by default).
pub const RUN_DIR: &str = "/run/haproxy";

/// `template.yaml`, CloudFormation tags kept.
pub fn template() -> serde_yaml::Value {
    let path = crate::root().join("template.yaml");
    let text = std::fs::read_to_string(&path).expect("read template.yaml");
    serde_yaml::from_str(&text).expect("template.yaml is YAML")
}

/// The user data script as a stack with `ProxyFleet=create` holds it for `haproxy`: its config
/// path (`ProxyConfigPath`) and its stats port (`ProxyStatsBind` `:<port>`).
pub fn script_for(haproxy: &Haproxy) -> String {
    let template = template();
    let mut stack = Stack::new(&template, OWN_ACCOUNT, REGION, STACK_ID);
    stack.refs.insert(
        "ProxyConfigPath".into(),
        json!(haproxy.config_path().display().to_string()),
    );
    stack.refs.insert(
        "ProxyStatsBind".into(),
        json!(format!(":{}", haproxy.stats.port())),
    );
    let user_data = &template["Resources"]["ProxyLaunchTemplate"]["Properties"]["LaunchTemplateData"]
        ["UserData"]["Fn::Base64"];
    match stack.resolve(user_data).expect("the user data resolves") {
        serde_json::Value::String(script) => script,
        other => panic!("the user data is not a script: {other:?}"),
    }
}

/// The `curl` stand-in: the way-out check's form only (`-w '%{http_code}'`), answering 404
/// from a reachable host and `000` (curl's exit 7, "couldn't connect") from one listed in the
/// `unreachable` file beside it. Any other use fails loudly.
const CURL: &str = r#"#!/bin/sh
dir=$(dirname "$0")
url= format=
while [ $# -gt 0 ]; do
  case $1 in
    -w) format=$2; shift ;;
    -o|--connect-timeout|--max-time) shift ;;
    -*) ;;
    *) url=$1 ;;
  esac
  shift
done
[ "$format" = '%{http_code}' ] || { echo "curl stand-in: only the way-out check is stood in for, got $*" >&2; exit 2; }
host=$(echo "$url" | sed -e 's|^https://||' -e 's|/.*||')
echo "$host" >>"$dir/curl.calls"
if grep -qx "$host" "$dir/unreachable" 2>/dev/null; then printf 000; exit 7; fi
printf 404
"#;

/// A host for the user data: `haproxy`'s directory bound over `/run/haproxy` and a file over
/// `/dev/console` in a private mount namespace, the `systemctl`, SSM agent and `curl` stand-ins
/// on PATH.
#[derive(Debug)]
pub struct Host {
    systemctl: Systemctl,
    bin: tempfile::TempDir,
    script: PathBuf,
    run_dir: PathBuf,
}

/// The namespace's setup: `$0` bound over `/run/haproxy`, `$1` over `/dev/console`.
const NAMESPACE: &str =
    r#"mount --bind "$0" /run/haproxy && mount --bind "$1" /dev/console && shift && exec "$@""#;

/// One run of the user data.
#[derive(Debug)]
pub struct Boot {
    pub status: Option<i32>,
    pub output: String,
}

impl Boot {
    pub fn success(&self) -> bool {
        self.status == Some(0)
    }
}

impl Host {
    pub fn new(haproxy: &Haproxy) -> Host {
        let bin = tempfile::Builder::new()
            .prefix("autoproxy-host-")
            .tempdir()
            .expect("host bin");
        // Installed, as on an image that carries the agent: the script must not install it.
        let agent = bin.path().join("amazon-ssm-agent");
        std::fs::write(&agent, "#!/bin/sh\nexit 0\n").expect("agent stand-in");
        std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755))
            .expect("chmod agent stand-in");
        let curl = bin.path().join("curl");
        std::fs::write(&curl, CURL).expect("curl stand-in");
        std::fs::set_permissions(&curl, std::fs::Permissions::from_mode(0o755))
            .expect("chmod curl stand-in");
        std::fs::write(bin.path().join("console"), "").expect("the console file");
        let script = bin.path().join("user-data.sh");
        std::fs::write(&script, script_for(haproxy)).expect("write the user data");
        Host {
            systemctl: Systemctl::new(haproxy),
            bin,
            script,
            run_dir: haproxy.dir().to_path_buf(),
        }
    }

    /// Runs the user data as cloud-init does (root, bash), in the namespace.
    pub fn boot(&self) -> Boot {
        let output = self
            .in_namespace(&["bash", &self.script.display().to_string()])
            .output()
            .expect("run unshare (util-linux)");
        Boot {
            status: output.status.code(),
            output: format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
        }
    }

    /// Makes these hosts unreachable from the instance (as the way-out check sees them).
    pub fn cut_off(&self, hosts: &[&str]) {
        let list: String = hosts.iter().map(|host| format!("{host}\n")).collect();
        std::fs::write(self.bin.path().join("unreachable"), list).expect("write unreachable");
    }

    /// What the user data wrote to the instance's console.
    pub fn console(&self) -> String {
        std::fs::read_to_string(self.bin.path().join("console")).expect("read the console")
    }

    /// The hosts the way-out check tried, in order.
    pub fn probed(&self) -> Vec<String> {
        std::fs::read_to_string(self.bin.path().join("curl.calls"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// `program` run in this host's namespace and environment.
    pub fn in_namespace(&self, program: &[&str]) -> Command {
        let mut command = Command::new("unshare");
        command
            .args(["-m", "--propagation", "private", "sh", "-c", NAMESPACE])
            .arg(&self.run_dir)
            .arg(self.bin.path().join("console"))
            .args(program)
            .envs(self.env())
            .current_dir("/")
            .stdin(Stdio::null());
        command
    }

    /// The wrapper that starts a program in this host's namespace (an SSM agent's `sh`).
    pub fn wrapper(&self) -> Vec<String> {
        vec![
            "unshare".into(),
            "-m".into(),
            "--propagation".into(),
            "private".into(),
            "sh".into(),
            "-c".into(),
            NAMESPACE.into(),
            self.run_dir.display().to_string(),
            self.bin.path().join("console").display().to_string(),
        ]
    }

    /// PATH with the SSM agent and `curl` stand-ins and the `systemctl` stand-in first.
    pub fn env(&self) -> Vec<(String, String)> {
        self.systemctl
            .env()
            .into_iter()
            .map(|(name, value)| {
                if name == "PATH" {
                    (name, format!("{}:{value}", self.bin.path().display()))
                } else {
                    (name, value)
                }
            })
            .collect()
    }

    pub fn systemctl_calls(&self) -> Vec<String> {
        self.systemctl.calls()
    }
}

/// Whether `/run/haproxy` exists here to be bound over (the HAProxy package creates it).
pub fn run_dir_exists() -> bool {
    Path::new(RUN_DIR).is_dir()
}
