//! The steps of an apply, in the order `Run::steps` takes them.

use std::path::Path;
use std::time::Duration;

use autoproxy::artifact::{self, MapFiles};

use super::{
    ADDRESS_BUDGET, Before, CHECK_TIMEOUT, DOWNLOAD_TIMEOUT, Failure, NewConfig, RELOAD_TIMEOUT,
    Run, Stage, child, config, fail, files, log, oneline,
};
use crate::haproxy::{self, DeclaredSocket};

impl Run {
    pub(super) async fn s3(&mut self) -> aws_sdk_s3::Client {
        if let Some(client) = &self.s3 {
            return client.clone();
        }
        let timeouts = aws_config::timeout::TimeoutConfig::builder()
            .connect_timeout(Duration::from_secs(10))
            .read_timeout(Duration::from_secs(30))
            .build();
        // The region from the environment, else the instance's (IMDSv2), as the SDK's default
        // chain finds it; credentials from the instance profile the same way.
        let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .timeout_config(timeouts)
            .load()
            .await;
        let client = aws_sdk_s3::Client::new(&sdk);
        self.s3 = Some(client.clone());
        client
    }

    pub(super) async fn download(&mut self) -> Result<(String, String), Failure> {
        let s3 = self.s3().await;
        let params = &self.params;
        let source = format!(
            "s3://{}/{} (version {})",
            params.bucket,
            params.key,
            if params.version.is_empty() {
                "latest"
            } else {
                &params.version
            }
        );
        let version = Some(params.version.as_str()).filter(|v| !v.is_empty());
        let fetched = tokio::time::timeout(
            DOWNLOAD_TIMEOUT,
            autoproxy::s3::get_bytes(&s3, &params.bucket, &params.key, version),
        )
        .await;
        let (bytes, version) = match fetched {
            Ok(Ok(got)) => got,
            Ok(Err(err)) => return fail(format!("download of {source} failed: {}", oneline(&err))),
            Err(_) => {
                return fail(format!(
                    "download of {source} failed: no answer within {} s",
                    DOWNLOAD_TIMEOUT.as_secs()
                ));
            }
        };
        log(
            "download",
            &format!("{source}: got version {version}, {} bytes", bytes.len()),
        );
        let text = String::from_utf8(bytes)
            .or_else(|_| fail(format!("version {version} is not UTF-8 text")))?;
        Ok((text, version))
    }

    pub(super) fn verify(&self, text: String, version: &str) -> Result<NewConfig, Failure> {
        let header = artifact::parse_header(&text).or_else(|err| {
            fail(match err {
                artifact::HeaderError::Mismatch { header, body } => format!(
                    "sha256 mismatch in version {version}: the header says {header}, the body hashes to {body}"
                ),
                other => format!("version {version} has no valid header: {other}"),
            })
        })?;
        let generation = header.generation;
        let description = haproxy::global_value(&text, "description").unwrap_or_default();
        let want = format!("autoproxy generation {generation}");
        if description != want {
            return fail(format!(
                "generation {generation} declares 'description {description}' in global, expected '{want}': its running generation could not be checked"
            ));
        }
        let socket = match haproxy::declared_socket(&text) {
            DeclaredSocket::Path(socket) => socket,
            DeclaredSocket::None => {
                return fail(format!(
                    "generation {generation} declares no 'stats socket <path>' in global: its running generation could not be checked"
                ));
            }
            DeclaredSocket::Unsafe(socket) => {
                return fail(format!(
                    "generation {generation} declares stats socket '{socket}': expected an absolute path of letters, digits and . _ / - only"
                ));
            }
        };
        log(
            "verify",
            &format!(
                "generation {generation}, sha256 {} matches its header",
                header.sha256
            ),
        );
        let maps = MapFiles::named_by(&text, generation);
        Ok(NewConfig {
            text,
            generation,
            socket,
            maps,
        })
    }

    /// `name address` lines from `show servers state` of the running HAProxy (a per-route
    /// config names one server per host), so the first switch to the map layout drops no route.
    pub(super) async fn seed_addresses(&self) -> String {
        let Some(api) = self.socket() else {
            return String::new();
        };
        let Ok(answer) = api.command("show servers state").await else {
            return String::new();
        };
        let mut seen = std::collections::BTreeSet::new();
        let mut lines = String::new();
        for line in answer.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            if words.len() < 18 || !words[0].bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            let (address, host) = (words[4], words[17]);
            let plain_host = host
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_.-".contains(&b));
            if plain_host
                && address != "0.0.0.0"
                && address.parse::<std::net::Ipv4Addr>().is_ok()
                && seen.insert(host.to_owned())
            {
                lines.push_str(&format!("{host} {address}\n"));
            }
        }
        lines
    }

    pub(super) async fn ensure_addresses(&mut self, text: &str) {
        let (new, installed) = self.unknown_hosts(text);
        if new.is_empty() && installed.is_empty() {
            return;
        }
        if self.state.before == Before::Stopped {
            // Nothing serves yet, so waiting gains nothing: the address service fills the map
            // at its fill pace once this apply returns, and `/ready` gates the traffic.
            let n = new.len() + installed.len();
            log(
                "addresses",
                &format!(
                    "{n} new host(s), none waited for: HAProxy serves nothing yet (the address service resolves them; /ready waits for its first pass)"
                ),
            );
            return;
        }
        let nameservers = artifact::nameservers(text).valid;
        let own = crate::own::Own::of(text, &self.paths.dir);
        // The installed config's hosts are the address service's: it reads them from that
        // file, fills or retries them at its own pace, and puts their held routes in as they
        // resolve. So it is asked only for the hosts new to this generation, if any. A new
        // instance's second apply, during the fill, asked for the 9,300 names the fill had not
        // reached, and took 0.57 s for answers that could only be "still resolving". With no
        // service running, nobody else resolves the installed ones: the apply does, as before.
        let ensured = crate::addresses::ensure_new(
            &self.paths.dir,
            &new,
            &installed,
            &nameservers,
            &own,
            ADDRESS_BUDGET,
        )
        .await;
        if ensured.by == crate::addresses::By::Resolver {
            // The service writes the file before it pushes: a name it says is missing may be
            // in the file and not in the worker.
            self.state.unpushed = ensured.missing.iter().map(|(n, _)| n.clone()).collect();
        }
        let n = ensured.resolved + ensured.missing.len();
        if n == 0 {
            log(
                "addresses",
                &format!(
                    "no new host; {} of the installed config's without an address are the address service's",
                    installed.len()
                ),
            );
            return;
        }
        log(
            "addresses",
            &format!(
                "{n} new host(s): {} resolved, {} without an address yet{}",
                ensured.resolved,
                ensured.missing.len(),
                ensured
                    .missing
                    .first()
                    .map(|(name, why)| format!(" (first: {name}: {why})"))
                    .unwrap_or_default()
            ),
        );
    }

    /// The route hosts of `text` without an address in the address map (IPv4 literals need
    /// none): those new to this generation, and those the installed config routes already.
    fn unknown_hosts(&self, text: &str) -> (Vec<String>, Vec<String>) {
        let known = std::fs::read_to_string(self.paths.dir.join("autoproxy/addresses.map"))
            .unwrap_or_default();
        let known: std::collections::BTreeSet<&str> = known
            .lines()
            .filter_map(|line| line.split_whitespace().next())
            .collect();
        let installed = std::fs::read_to_string(self.config()).unwrap_or_default();
        // One parser of the artifact: the same route hosts and nameservers the resolver reads.
        let installed: std::collections::BTreeSet<String> =
            artifact::route_hosts(&installed).into_iter().collect();
        artifact::route_hosts(text)
            .into_iter()
            .filter(|host| {
                host.parse::<std::net::Ipv4Addr>().is_err() && !known.contains(host.as_str())
            })
            .partition(|host| !installed.contains(host))
    }

    /// `haproxy -c` on the staged config. Only an exit status from HAProxy is its verdict
    /// (`rejected`); a check that could not run or was killed judged nothing.
    pub(super) async fn check(&mut self, staged: &Path, generation: u64) -> Result<(), Failure> {
        let args = vec![
            "-c".to_owned(),
            "-f".to_owned(),
            staged.display().to_string(),
        ];
        let finished = child::run(Path::new("haproxy"), &args, &self.paths.dir, CHECK_TIMEOUT)
            .await
            .or_else(|err| fail(format!("cannot run haproxy -c: {err}")))?;
        for line in finished.output.lines().filter(|l| !l.trim().is_empty()) {
            log("check", line);
        }
        if finished.code.is_none() {
            return fail(format!(
                "haproxy -c did not judge generation {generation}: {}",
                finished.status()
            ));
        }
        if !finished.success() {
            self.verdict.rejected = true;
            let alert = finished
                .output
                .lines()
                .find(|l| l.contains("ALERT"))
                .or_else(|| finished.output.lines().last())
                .unwrap_or("no output");
            return fail(format!(
                "haproxy -c rejected generation {generation}: {}",
                oneline(alert)
            ));
        }
        Ok(())
    }

    pub(super) fn keep(&mut self) -> Result<(), Failure> {
        let config = self.config().to_path_buf();
        if config.is_file() && self.state.before == Before::Stopped {
            log(
                "keep",
                &format!(
                    "HAProxy does not run {}: last-known-good stays as it is",
                    config.display()
                ),
            );
        } else if config.is_file() && self.state.installed_gen != self.state.running_gen {
            // Never verified running: keeping it would make a rollback restore a config that
            // may not work.
            let kept = if self.paths.last_good.is_file() {
                format!(
                    "generation {}",
                    config::generation_of(&self.paths.last_good)
                )
            } else {
                "absent".to_owned()
            };
            log(
                "keep",
                &format!(
                    "generation {} in {} never ran here: last-known-good stays {kept}",
                    self.state.installed_gen,
                    config.display()
                ),
            );
        } else if config.is_file() {
            // Its maps first, byte for byte: a last-known-good config is never newer than
            // the maps kept with it (a rollback checks the kept generation map).
            let installed = std::fs::read_to_string(&config).unwrap_or_default();
            super::kept::keep(&self.paths.dir, &installed, self.state.installed_gen).or_else(
                |err| {
                    fail(format!(
                        "cannot keep the maps of {}: {err}",
                        config.display()
                    ))
                },
            )?;
            files::copy_over(&config, &self.paths.last_good, ".autoproxy-last-good").or_else(
                |err| {
                    fail(format!(
                        "cannot keep {} as {}: {err}",
                        config.display(),
                        self.paths.last_good.display()
                    ))
                },
            )?;
            log(
                "keep",
                &format!(
                    "generation {} kept as last-known-good in {}",
                    self.state.installed_gen,
                    self.paths.last_good.display()
                ),
            );
        } else {
            let _ = std::fs::remove_file(&self.paths.last_good);
            log(
                "keep",
                &format!(
                    "no config installed at {} yet: nothing to keep",
                    config.display()
                ),
            );
        }
        Ok(())
    }

    pub(super) fn swap(&mut self, staged: &Path, generation: u64) -> Result<(), Failure> {
        let config = self.config().to_path_buf();
        if let Ok(meta) = std::fs::metadata(&config) {
            use std::os::unix::fs::{MetadataExt, PermissionsExt};
            let _ = std::fs::set_permissions(
                staged,
                std::fs::Permissions::from_mode(meta.mode() & 0o7777),
            );
            if std::os::unix::fs::chown(staged, Some(meta.uid()), Some(meta.gid())).is_err() {
                log(
                    "swap",
                    &format!("could not keep the owner of {}", config.display()),
                );
            }
        }
        files::sync_dir(&self.paths.maps_dir)
            .and_then(|()| std::fs::File::open(staged)?.sync_all())
            .or_else(|err| {
                fail(format!(
                    "could not flush {} to disk: {err}",
                    staged.display()
                ))
            })?;
        std::fs::rename(staged, &config)
            .or_else(|err| fail(format!("cannot rename into {}: {err}", config.display())))?;
        self.undo.stage = Stage::Installed;
        if let Err(err) = files::sync_dir(&self.paths.dir) {
            log(
                "swap",
                &format!(
                    "WARNING: could not flush {} (the rename of {}) to disk: {err}",
                    self.paths.dir.display(),
                    config.display()
                ),
            );
        }
        log(
            "swap",
            &format!("generation {generation} installed at {}", config.display()),
        );
        Ok(())
    }

    /// The reload command; when HAProxy is not running and the command is
    /// `systemctl reload <unit>`, `systemctl start <unit>` instead (a stopped unit cannot
    /// reload). Any other command must start a stopped HAProxy itself.
    pub(super) fn reload_words(&self, starting: bool) -> Vec<String> {
        if starting {
            start_words(&self.params.reload)
        } else {
            self.params.reload.clone()
        }
    }

    pub(super) async fn reload(&self, starting: bool) -> Result<child::Finished, Failure> {
        let words = self.reload_words(starting);
        if starting && words != self.params.reload {
            log(
                "reload",
                "HAProxy is not running: starting it instead of reloading",
            );
        }
        let (program, args) = words
            .split_first()
            .map_or((String::new(), Vec::new()), |(p, a)| {
                (p.clone(), a.to_vec())
            });
        child::run(Path::new(&program), &args, &self.paths.dir, RELOAD_TIMEOUT)
            .await
            .or_else(|err| fail(format!("cannot run the reload command ({program}): {err}")))
    }

    /// Route maps of every generation but the running one and last-known-good's go.
    pub(super) fn tidy(&self, generation: u64) {
        let keep = config::generation_of(&self.paths.last_good);
        let Ok(entries) = std::fs::read_dir(&self.paths.maps_dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(g) = name
                .to_str()
                .and_then(|n| n.strip_prefix("gen-"))
                .and_then(|g| g.parse::<u64>().ok())
            else {
                continue;
            };
            if g != generation && g != keep && entry.path().is_dir() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
        self.remove_leftovers();
    }

    /// Staging a killed run left behind (under the lock, no other run is staging): its
    /// `autoproxy/.stage.*` directories, the maps' files set aside by `files::replace`, and
    /// `.autoproxy-*` files beside the config; and the files set aside by writers that do not
    /// hold this lock (the address service's map, a busy apply's record) once their writer
    /// is gone ([`leftover`]).
    pub(super) fn remove_leftovers(&self) {
        for (dir, prefixes) in [
            (&self.paths.maps_dir, MAPS_LEFTOVERS),
            (
                &self.paths.dir,
                &[
                    ".autoproxy-new.",
                    ".autoproxy-check.",
                    ".autoproxy-last-good.",
                    ".autoproxy-restore.",
                    ".autoproxy-output.",
                ][..],
            ),
        ] {
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                let leftover = entry
                    .file_name()
                    .to_str()
                    .is_some_and(|name| leftover(name, prefixes));
                if !leftover || self.undo.temps.contains(&path) {
                    continue;
                }
                let _ = if path.is_dir() {
                    std::fs::remove_dir_all(&path)
                } else {
                    std::fs::remove_file(&path)
                };
            }
        }
    }
}

/// What a killed run leaves in the maps directory: its staging, the route maps set aside
/// under the apply's lock, and the files other writers set aside (`files::temp_path` names:
/// `.<file>.<pid>.<nanos>`): the address map, which the service writes under its own lock,
/// and the fleet record, which a busy apply writes without the apply's lock.
const MAPS_LEFTOVERS: &[&str] = &[
    ".stage.",
    ".routes.map.",
    ".suffixes.map.",
    ".generation.map.",
    ".addresses.map.",
    ".last-apply.json.",
];

/// The prefixes in [`MAPS_LEFTOVERS`] whose writer may still be writing: their files are
/// leftovers only once the process that named them has ended.
const OTHERS_TEMPS: &[&str] = &[".addresses.map.", ".last-apply.json."];

/// Whether the file `name` is a leftover of one of `prefixes`; a file another writer sets
/// aside only when its pid (the name's second to last part) names no live process.
fn leftover(name: &str, prefixes: &[&str]) -> bool {
    let Some(prefix) = prefixes.iter().find(|p| name.starts_with(**p)) else {
        return false;
    };
    if !OTHERS_TEMPS.contains(prefix) {
        return true;
    }
    let mut parts = name[prefix.len()..].split('.');
    match (
        parts.next().and_then(|pid| pid.parse::<u32>().ok()),
        parts.next(),
        parts.next(),
    ) {
        (Some(pid), Some(_nanos), None) => !Path::new(&format!("/proc/{pid}")).exists(),
        _ => false,
    }
}

/// What starts a stopped HAProxy, given the reload command: `systemctl start <unit>` for
/// `systemctl reload <unit>`; any other command as it is.
fn start_words(reload: &[String]) -> Vec<String> {
    let mut words = reload.to_vec();
    let systemctl = words
        .first()
        .is_some_and(|w| w == "systemctl" || w.ends_with("/systemctl"));
    if systemctl && words.get(1).is_some_and(|w| w == "reload") {
        words[1] = "start".to_owned();
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The temp files `files::replace` writes for the address map and the fleet record are
    /// found; one whose writer still runs (the address service under its lock) is kept.
    #[test]
    fn leftovers_are_the_temps_actually_written_and_only_a_gone_writers() {
        let dir = Path::new("/autoproxy");
        let name = |path: std::path::PathBuf| {
            path.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        let mut child = std::process::Command::new("true").spawn().expect("spawns");
        child.wait().expect("ends");
        let gone = child.id();
        let live = name(files::temp_path(dir, ".addresses.map"));
        assert!(!leftover(&live, MAPS_LEFTOVERS), "{live} is being written");
        for written in [".addresses.map", ".last-apply.json"] {
            let ours = name(files::temp_path(dir, written));
            let theirs = ours.replacen(&std::process::id().to_string(), &gone.to_string(), 1);
            assert!(leftover(&theirs, MAPS_LEFTOVERS), "{theirs} is not found");
        }
        for kept in [
            "addresses.map",
            "last-apply.json",
            ".addresses.map.lock",
            "routes.map",
        ] {
            assert!(!leftover(kept, MAPS_LEFTOVERS), "{kept}");
        }
        assert!(leftover(".routes.map.1.2", MAPS_LEFTOVERS));
    }

    fn words(text: &str) -> Vec<String> {
        text.split(' ').map(str::to_owned).collect()
    }

    #[test]
    fn a_stopped_unit_is_started_not_reloaded() {
        for (reload, start) in [
            ("systemctl reload haproxy", "systemctl start haproxy"),
            (
                "/usr/bin/systemctl reload haproxy@edge",
                "/usr/bin/systemctl start haproxy@edge",
            ),
            (
                "systemctl reload-or-restart haproxy",
                "systemctl reload-or-restart haproxy",
            ),
            (
                "/usr/local/bin/reload-haproxy",
                "/usr/local/bin/reload-haproxy",
            ),
            ("mysystemctl reload haproxy", "mysystemctl reload haproxy"),
        ] {
            assert_eq!(start_words(&words(reload)), words(start), "{reload}");
        }
    }
}
