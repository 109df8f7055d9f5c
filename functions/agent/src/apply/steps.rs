//! The steps of an apply that check, keep, swap and reload, in the order `Run::steps` takes
//! them (the download and verification are `download`'s, the hosts `hosts`', the cleanup
//! `tidy`'s).

use std::path::Path;

use super::{
    Before, CHECK_TIMEOUT, Failure, RELOAD_TIMEOUT, Run, Stage, child, config, fail, files, log,
    oneline,
};

impl Run {
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
