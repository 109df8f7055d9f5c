//! An apply stopped at every point by a cancel (SIGTERM) or SSM's timeout (SIGKILL to the
//! script's process group): HAProxy keeps serving what it ran, the file is what runs or the
//! next apply repairs it, and the fleet record never claims what does not run. Then the
//! findings that the old bash document got wrong: a stopped HAProxy, a cancel during the
//! reload, and reload children that outlived the apply.
//!
//! SIGTERM goes to the agent alone (the child of the stand-in's `sh`), so that the run ends
//! with the agent's own exit status: sent to the whole group, it would also end that `sh` at
//! once, before the agent has rolled back and written its record.
//!
//! The matrix stops the agent with its test hook (`AUTOPROXY_AGENT_PAUSE=<point>`: it logs
//! `autoproxy-apply: pause: before <point>` and sleeps there), so it cannot run against the
//! old document, which has no such hook; what the old one did at each point is argued on the
//! tests below that run without the hook.

mod bounds;
mod finish;
mod matrix;
mod orphans;
mod systemctl;

use super::*;

/// How long a run may take to reach its pause point.
const PAUSE_WAIT: Duration = Duration::from_secs(30);

impl Fixture {
    fn delete_record(&self) {
        let s3 = aws_sdk_s3::Client::new(&self.sdk);
        self.rt
            .block_on(s3.delete_object().bucket(BUCKET).key(RECORD).send())
            .unwrap();
    }

    /// The fleet record as it is now, if there is one.
    fn record(&self) -> Option<serde_json::Value> {
        let s3 = aws_sdk_s3::Client::new(&self.sdk);
        let object = self
            .rt
            .block_on(s3.get_object().bucket(BUCKET).key(RECORD).send())
            .ok()?;
        let bytes = self.rt.block_on(object.body.collect()).unwrap().to_vec();
        Some(serde_json::from_slice(&bytes).unwrap())
    }

    /// Starts an apply of `version` in the background with `env` added.
    fn start_apply(
        &self,
        document: &Document,
        version: &str,
        env: &[(String, String)],
    ) -> Background {
        self.spawn(document, &[("ConfigVersion", version)], env, &[])
            .unwrap()
    }
}

/// The apply's own process among the run's (the launcher's `sh` may run it as its child).
fn agent_pid(background: &Background) -> u32 {
    background
        .processes()
        .into_iter()
        .find(|(_, argv)| {
            argv.first()
                .is_some_and(|a| a.ends_with("/autoproxy-agent"))
                && argv.get(1).is_some_and(|a| a == "apply")
        })
        .unwrap_or_else(|| panic!("no agent in {:?}", background.processes()))
        .0
}

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}
