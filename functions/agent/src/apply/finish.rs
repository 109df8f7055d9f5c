//! How a run ends: the rollback of what a failure left installed, the fleet record, and the
//! address service kept running.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::kept;
use super::{
    Answer, Before, FINISH_BUDGET, Failure, Outcome, QUESTION_TIMEOUT, RECORD_BUDGET,
    RUNNING_TIMEOUT, Run, Running, SILENT_BUDGET, Stage, config, failed, files, log, oneline,
    record,
};
use crate::haproxy::RuntimeApi;

impl Run {
    /// Ends the run within [`FINISH_BUDGET`]: on failure rolls back what was installed (by
    /// the budget less [`RECORD_BUDGET`]); writes the fleet record (by the budget); after a
    /// success keeps the address service running (by the budget); returns the exit status.
    pub(super) async fn finish(&mut self, result: Result<(), Failure>) -> u8 {
        let deadline = Instant::now() + FINISH_BUDGET;
        let undo_by = deadline - RECORD_BUDGET;
        let failure = result.as_ref().err().map(|f| f.reason.clone());
        let (code, outcome, reason) = match tokio::time::timeout_at(
            undo_by.into(),
            self.undo(result),
        )
        .await
        {
            Ok(ended) => ended,
            Err(_) => {
                let reason = format!(
                    "{}; the rollback did not end within {} s (stopped at {}): what HAProxy runs is in the record",
                    failure.unwrap_or_default(),
                    (FINISH_BUDGET - RECORD_BUDGET).as_secs(),
                    self.step
                );
                failed(&reason);
                (3, Outcome::Failed, reason)
            }
        };
        self.pause("record").await;
        if self.lock.is_none() {
            // Never held the lock (busy, or stopped before it): the run that holds it, or the
            // last one that did, reports what runs; a record from here would overwrite that.
            log(
                "fleet",
                "no record: this run never held the lock, the record is its holder's",
            );
        } else if tokio::time::timeout_at(deadline.into(), self.report(outcome, &reason))
            .await
            .is_err()
        {
            log(
                "fleet",
                &format!(
                    "WARNING: the record was not written within {} s",
                    RECORD_BUDGET.as_secs()
                ),
            );
        }
        // The service's install may wait on systemctl: not under the lock, which another
        // apply is waiting for.
        self.lock = None;
        if code == 0 {
            self.ensure_resolver(deadline).await;
        }
        code
    }

    /// What the failure leaves to undo, undone: the exit status, the outcome and the reason.
    async fn undo(&mut self, result: Result<(), Failure>) -> (u8, Outcome, String) {
        match result {
            Ok(()) => (0, self.verdict.outcome, String::new()),
            Err(Failure { reason }) if self.undo.stage == Stage::MapsInstalled => {
                self.step = "rollback";
                let code = self.unstage_maps(&reason);
                (code, Outcome::Failed, reason)
            }
            Err(Failure { reason }) if self.undo.stage == Stage::Installed => {
                self.step = "rollback";
                self.rollback(&reason).await
            }
            Err(Failure { reason }) => {
                failed(&format!(
                    "{reason}; nothing changed ({})",
                    self.before_text()
                ));
                let outcome = if self.verdict.rejected {
                    Outcome::Rejected
                } else {
                    Outcome::Failed
                };
                (1, outcome, reason)
            }
        }
    }

    pub(super) async fn rollback(&mut self, why: &str) -> (u8, Outcome, String) {
        if !self.paths.last_good.is_file() {
            return self.first_install_failed(why).await;
        }
        let lg_gen = config::generation_of(&self.paths.last_good);
        if let Some(ran) = self.state.before.running()
            && lg_gen < ran.generation
        {
            let reason = format!(
                "{why}; last-known-good holds generation {lg_gen}, older than generation {} that ran before this apply: not restored (a person must look)",
                ran.generation
            );
            failed(&reason);
            return (3, Outcome::Failed, reason);
        }
        if let Err(detail) = self.restore_last_good(lg_gen) {
            let reason = format!("{why}; {detail}");
            failed(&reason);
            return (3, Outcome::Failed, reason);
        }
        if let Err(detail) = self.reload_last_good(lg_gen).await {
            let reason =
                format!("{why}; restored last-known-good generation {lg_gen} but {detail}");
            failed(&reason);
            return (3, Outcome::Failed, reason);
        }
        let reason = format!("{why}; restored last-known-good generation {lg_gen}");
        failed(&reason);
        (2, Outcome::RolledBack, reason)
    }

    /// Puts last-known-good (generation `lg_gen`) back in place: its maps first (the bytes
    /// kept with it, `kept::put_back`; written from its own route lines only when none were
    /// kept), so the restored config finds its routes when it is read; then the file.
    fn restore_last_good(&mut self, lg_gen: u64) -> Result<(), String> {
        let config = self.config().to_path_buf();
        let restored = std::fs::read_to_string(&self.paths.last_good).and_then(|text| {
            match kept::last_good(&self.paths.dir, &text, lg_gen) {
                Some(saved) => kept::put_back(&saved)?,
                None => {
                    log(
                        "rollback",
                        &format!("no maps kept byte for byte with generation {lg_gen}: written from its route lines"),
                    );
                    self.restore_maps(&text)?
                }
            };
            files::copy_over(&self.paths.last_good, &config, ".autoproxy-restore")
        });
        if let Err(err) = restored {
            // Read back: a replace that renamed but could not flush the directory did restore
            // the file; the rollback goes on and says what is not on disk for sure.
            let in_place = std::fs::read(&config).ok();
            if in_place.is_none() || in_place != std::fs::read(&self.paths.last_good).ok() {
                return Err(format!(
                    "could not restore last-known-good generation {lg_gen} from {}: {err}",
                    self.paths.last_good.display()
                ));
            }
            log(
                "rollback",
                &format!(
                    "WARNING: restored {}, but not flushed to disk: {err}",
                    config.display()
                ),
            );
        }
        log(
            "rollback",
            &format!(
                "restored last-known-good generation {lg_gen} to {}",
                config.display()
            ),
        );
        Ok(())
    }

    /// The rollback's reload (or start), and its wait for a new worker running `lg_gen`.
    async fn reload_last_good(&mut self, lg_gen: u64) -> Result<(), String> {
        // HAProxy 2.6's master can lose a USR2 that comes right after the previous reload's
        // worker started serving, before the master is back in its loop (measured: about 4
        // of 10 at once, none 50 ms later): a rollback's reload waits until one second after
        // this run's own.
        if let Some(reloaded) = self.undo.reloaded_at {
            let settle = Duration::from_secs(1).saturating_sub(reloaded.elapsed());
            tokio::time::sleep(settle).await;
        }
        let starting = !self.haproxy_runs().await;
        let before = match self.ask(QUESTION_TIMEOUT).await {
            Answer::Runs(running) => Some(running.pid),
            _ => None,
        };
        match self.reload(starting).await {
            Ok(finished) if finished.success() => {}
            Ok(finished) => {
                return Err(format!(
                    "its reload failed too ({}: {})",
                    finished.status(),
                    oneline(&finished.output)
                ));
            }
            Err(Failure { reason }) => return Err(format!("its reload failed too ({reason})")),
        }
        if let (true, Some(socket)) = (lg_gen > 0, crate::haproxy::socket_of(self.config()))
            && let Err(seen) = wait_generation(&socket, lg_gen, before).await
        {
            return Err(format!(
                "HAProxy does not report it running (it reports: {seen})"
            ));
        }
        Ok(())
    }

    /// A failure with the new route maps in place but neither the config nor HAProxy
    /// touched: the installed config's own maps go back (HAProxy never read the new ones), no
    /// reload. Exit 1, or 3 when they cannot be written.
    fn unstage_maps(&mut self, why: &str) -> u8 {
        let running = self.before_text();
        let installed = std::fs::read_to_string(self.config()).unwrap_or_default();
        if installed.is_empty() {
            failed(&format!(
                "{why}; nothing changed (no config installed, {running})"
            ));
            return 1;
        }
        let restored = match self.undo.maps_before.take() {
            Some(saved) => kept::put_back(&saved),
            None => self.restore_maps(&installed),
        };
        match restored {
            Ok(_) => {
                failed(&format!(
                    "{why}; nothing changed (the installed config's maps written back, {running})"
                ));
                1
            }
            Err(err) => {
                failed(&format!(
                    "{why}; could not write the installed config's maps back ({err}): the map files may not match {}",
                    self.config().display()
                ));
                3
            }
        }
    }

    /// A failed first install (no last-known-good): when HAProxy runs the new generation
    /// after all, the config stays (removing it would leave HAProxy running a file that is
    /// gone); else it goes.
    async fn first_install_failed(&mut self, why: &str) -> (u8, Outcome, String) {
        let runs_new = matches!(self.ask(SILENT_BUDGET).await,
            Answer::Runs(running) if running.generation == self.verdict.generation && self.verdict.generation > 0);
        let reason = if runs_new {
            format!(
                "{why}; no last-known-good to restore (first install), and HAProxy runs generation {} from it: it stays installed",
                self.verdict.generation
            )
        } else {
            let _ = std::fs::remove_file(self.config());
            format!("{why}; no last-known-good to restore (first install): removed the new config")
        };
        failed(&reason);
        let outcome = if runs_new {
            Outcome::Failed
        } else {
            Outcome::RolledBack
        };
        (2, outcome, reason)
    }

    /// What ran when the run took the lock, as a failure line says it.
    fn before_text(&self) -> String {
        match self.state.before {
            Before::Stopped => "HAProxy was not running".to_owned(),
            Before::Runs(None) => "HAProxy runs no autoproxy generation".to_owned(),
            Before::Runs(Some(running)) => format!("running generation {}", running.generation),
        }
    }

    /// What HAProxy runs at the end, for the record: what it reports now; when it stays
    /// silent, what it reported last in this run, and why that is not confirmed.
    async fn at_the_end(&mut self) -> (u64, String) {
        match self.ask(SILENT_BUDGET).await {
            Answer::Runs(running) => (running.generation, String::new()),
            Answer::Silent(why) => match self.state.seen {
                Some((generation, step)) => (
                    generation,
                    format!(
                        "HAProxy did not answer at the end ({why}): generation {generation} is what it reported last, at step {step}"
                    ),
                ),
                None => (
                    0,
                    format!(
                        "HAProxy did not answer during this run ({why}): the generation it runs is unknown"
                    ),
                ),
            },
            Answer::NoSocket | Answer::NothingListens => {
                if self.service.runs().await.unwrap_or(false) {
                    (
                        0,
                        format!(
                            "HAProxy runs, but not on the stats socket {} declares",
                            self.config().display()
                        ),
                    )
                } else {
                    (0, String::new())
                }
            }
        }
    }

    /// Writes the fleet record (the generation HAProxy reports now, and the file's sha256
    /// when the file is what runs) and, beside it, reads the fleet report for the other
    /// proxies' addresses ([`crate::own::peers`]): both in one wait, so the read adds no time.
    pub(super) async fn report(&mut self, outcome: Outcome, reason: &str) {
        let record = self.record(outcome, reason).await;
        if let Err(err) = record::write_local(&self.paths.dir, &record) {
            log(
                "fleet",
                &format!(
                    "WARNING: could not leave the record in {}: {err}",
                    self.paths.dir.join(record::LOCAL).display()
                ),
            );
        }
        let key = record::key(
            &self.params.key,
            &self.params.instance_arn_prefix,
            &record.instance_id,
        );
        let s3 = self.s3().await;
        let (put, ()) = tokio::join!(
            record::put(&s3, &self.params.bucket, &key, &record),
            self.learn_peers(&s3, &record.instance_id)
        );
        match put {
            Ok(()) => log(
                "fleet",
                &format!(
                    "{}: reported generation {} running to s3://{}/{key} (apply {})",
                    outcome.as_str(),
                    record.generation,
                    self.params.bucket,
                    self.verdict.apply_id
                ),
            ),
            Err(err) => log(
                "fleet",
                &format!(
                    "WARNING: could not write s3://{}/{key}: {}",
                    self.params.bucket,
                    oneline(&err)
                ),
            ),
        }
    }

    /// The fleet record of this run.
    async fn record(&mut self, outcome: Outcome, reason: &str) -> record::Record {
        let (generation, unconfirmed) = self.at_the_end().await;
        let installed = std::fs::read_to_string(self.config()).unwrap_or_default();
        let sha256 = if generation != 0 && config::header_generation(&installed) == Some(generation)
        {
            config::header_sha256(&installed).unwrap_or_default()
        } else {
            String::new()
        };
        // Applied at run time: what the worker held when the update read it back. Else what a
        // worker loads, the file.
        let addresses = match (&self.state.worker_addresses, outcome) {
            (Some(read_back), Outcome::Applied) => read_back.clone(),
            _ => std::fs::read_to_string(self.paths.dir.join(crate::address_map::MAP))
                .unwrap_or_default(),
        };
        let taken = self.verdict.path_taken.as_ref();
        record::Record {
            instance_id: record::instance_id(),
            generation,
            sha256,
            result: outcome,
            reason: reason.to_owned(),
            version_id: if self.verdict.version_applied.is_empty() {
                self.params.version.clone()
            } else {
                self.verdict.version_applied.clone()
            },
            at: record::now_utc(),
            agent: std::env::var("AUTOPROXY_AGENT_SHA256").unwrap_or_default(),
            apply_id: self.verdict.apply_id.clone(),
            path: taken.map(|p| p.path.to_owned()).unwrap_or_default(),
            path_reason: taken.map(|p| p.why.clone()).unwrap_or_default(),
            unconfirmed,
            unresolved_routes: record::unresolved_routes(&installed, &addresses),
            addresses: crate::own::instance_addresses(),
        }
    }

    /// Reads the fleet report and leaves the other proxies' addresses beside the config; a
    /// failure (no report yet, no permission) keeps what the file holds and never fails the
    /// apply.
    async fn learn_peers(&self, s3: &aws_sdk_s3::Client, instance_id: &str) {
        let key = autoproxy::fleet::report_key(&self.params.key);
        let text = match crate::own::peers::fetch(s3, &self.params.bucket, &key).await {
            Ok(text) => text,
            Err(err) => {
                log(
                    "fleet",
                    &format!(
                        "the other proxies stay as {} says: s3://{}/{key}: {}",
                        crate::own::peers::FILE,
                        self.params.bucket,
                        oneline(&err)
                    ),
                );
                return;
            }
        };
        let written = crate::own::peers::of_report(&text, instance_id)
            .map_err(|err| err.to_string())
            .and_then(|peers| {
                crate::own::peers::write(&self.paths.dir, &peers)
                    .map(|()| peers.len())
                    .map_err(|err| err.to_string())
            });
        let note = match written {
            Ok(n) => format!(
                "{n} address(es) of the other proxies, from s3://{}/{key}",
                self.params.bucket
            ),
            Err(err) => format!(
                "WARNING: the other proxies stay as they were: s3://{}/{key}: {}",
                self.params.bucket,
                oneline(&err)
            ),
        };
        log("fleet", &note);
    }

    /// Keeps the address service installed and running, by `deadline`; its failures never
    /// undo a config that runs.
    pub(super) async fn ensure_resolver(&self, deadline: Instant) {
        let agent = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("autoproxy-agent"));
        let config = self.config().to_path_buf();
        // systemctl is waited for (and polled) off the runtime thread, which serves signals;
        // every systemctl call ends by the deadline (killed past it).
        let lines = tokio::task::spawn_blocking(move || {
            crate::unit::ensure_lines(&agent, &config, deadline)
        })
        .await
        .unwrap_or_else(|err| vec![format!("WARNING: the service's install ended early: {err}")]);
        for line in lines {
            log("resolver", &line);
        }
    }
}

/// Polls the worker on `socket` until it runs `generation` (bounded) and, when `replaced` is
/// the worker that answered before a reload, until another one answers: the old worker may
/// still answer for the generation a rollback restores. On time-out, what it reported last.
pub(super) async fn wait_generation(
    socket: &Path,
    generation: u64,
    replaced: Option<u32>,
) -> Result<Running, String> {
    let api = RuntimeApi::new(socket, QUESTION_TIMEOUT);
    let deadline = Instant::now() + RUNNING_TIMEOUT;
    loop {
        let seen = match Running::read(&api).await {
            Ok(running) if running.generation == generation && Some(running.pid) != replaced => {
                return Ok(running);
            }
            Ok(running) if Some(running.pid) == replaced => format!(
                "generation {} from worker {}, the one the reload was to replace",
                running.generation, running.pid
            ),
            Ok(running) => format!(
                "generation {} from worker {}",
                running.generation, running.pid
            ),
            Err(err) => err.to_string(),
        };
        if Instant::now() >= deadline {
            return Err(seen);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
