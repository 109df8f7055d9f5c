//! `autoproxy-agent apply`: installs one version of the generated haproxy.cfg on this instance
//! (docs/ARCHITECTURE.md, "The apply" and "When a proxy reloads").
//!
//! Under an exclusive lock beside the config, as stages that pass values along (`stages.rs`):
//! state (what runs: the service, and the installed config's stats socket, `running.rs`) →
//! fetch (download, verify its sha256, skip unless newer than what runs) → prepare (the new
//! hosts' addresses for 2 s, none on a first install, the route maps staged as they may
//! serve: a route whose host has no address is held, `crate::routes`) → `haproxy -c` on the config as it reads the staged
//! maps → keep the current config as last-known-good (only if HAProxy runs it) → install (the
//! route maps renamed into place, the way decided) → activate, one of two ways:
//! * only the route tables changed (the config's structure equals what runs): replace the
//!   running worker's route maps over the runtime API, read them back, set its generation
//!   map, rename the generation map and the config into place. No reload; if HAProxy does
//!   not take the update, the other way.
//! * anything else: rename the generation map and the config into place → reload (or start,
//!   when HAProxy is not running) → wait for a new worker that reports the new generation.
//!
//! A failure with only the route maps renamed writes the installed config's own maps back:
//! nothing changed. Once HAProxy was asked to take the routes, or the config is renamed:
//! restore last-known-good's config and its maps (the bytes kept beside it, `apply/kept.rs`;
//! written from its route lines only when none were kept), reload, and
//! exit non-zero with the reason. Every run that took the lock ends with a fleet record (one
//! that never got it leaves the holder's record alone) whose generation is
//! what HAProxy reported at the end (or, when it stays silent, last during the run, marked
//! unconfirmed), never what the run intended.
//!
//! A signal (SIGTERM, SIGINT, SIGHUP) at any step stops that step, kills whatever it had
//! started, and ends the run as a failure of that step would: nothing installed yet → nothing
//! changed; installed → rolled back. SIGKILL leaves no record of this run; the next run sees
//! files HAProxy does not run and installs its generation again.
//!
//! Exit status: 0 applied or skipped; 1 rejected or failed, nothing changed; 2 failed and
//! rolled back; 3 failed and the rollback did not complete either (a person must look).
//! Every log line is `autoproxy-apply: <step>: <detail>`; a failure adds one
//! `autoproxy-apply: FAILED: <reason>` line on stderr.

mod bounds;
mod config;
mod download;
mod finish;
mod hooks;
mod hosts;
mod kept;
mod maps;
mod params;
mod signals;
mod stages;
mod steps;
mod tidy;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::haproxy::RuntimeApi;
pub use crate::record::Outcome;
use crate::running::{Answer, Before, Running, Service};
pub use crate::running::{QUESTION_TIMEOUT, SILENT_BUDGET, processes_reading};
use crate::{child, files, record};
pub use bounds::*;
use hooks::locked_budget;
pub use params::Params;
use signals::Signals;
use stages::NewConfig;

/// One log line on stdout.
pub fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn log(step: &str, detail: &str) {
    say(&format!("autoproxy-apply: {step}: {detail}"));
}

fn failed(detail: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "autoproxy-apply: FAILED: {detail}");
}

/// Where a run stands: what a failure (or a signal) at this point must undo.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Prepare,
    /// The new route maps are in place, the config and HAProxy untouched: a failure puts the
    /// installed config's own maps back, and nothing else changed.
    MapsInstalled,
    /// The new file is in place, or HAProxy was asked to take the new routes: from here a
    /// failure rolls back.
    Installed,
}

/// Which way this run brought its generation to HAProxy, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathTaken {
    /// `runtime` (no reload) or `reload`.
    pub path: &'static str,
    pub why: String,
}

/// Why a step failed (whether HAProxy rejected the config is the verdict's `rejected`).
#[derive(Debug)]
struct Failure {
    reason: String,
}

fn fail<T>(reason: impl Into<String>) -> Result<T, Failure> {
    Err(Failure {
        reason: reason.into(),
    })
}

/// The run, outside the step future so that a signal can cancel that future and still know
/// what to undo. The stages themselves pass values ([`NewConfig`], `Prepared`, `Activation`);
/// what lives here is what every stage and the ending share, in four parts: where the files
/// are, what HAProxy ran, what a failure must undo, and what the record will say.
#[derive(Debug)]
struct Run {
    params: Params,
    paths: Paths,
    /// How this instance says whether HAProxy runs.
    service: Service,
    s3: Option<aws_sdk_s3::Client>,
    /// The apply's lock while held: a run that never held it writes no fleet record.
    lock: Option<std::fs::File>,
    started: Instant,
    step: &'static str,
    state: State,
    undo: Undo,
    verdict: Verdict,
}

/// Where the apply's files are.
#[derive(Debug)]
struct Paths {
    /// The config's directory.
    dir: PathBuf,
    last_good: PathBuf,
    /// The route maps' directory (`<dir>/autoproxy`).
    maps_dir: PathBuf,
}

/// What HAProxy ran and said during the run.
#[derive(Debug)]
struct State {
    /// What ran when the run took the lock.
    before: Before,
    /// The generation in the installed config's header.
    installed_gen: u64,
    /// The generation HAProxy runs (0: it runs none of autoproxy's).
    running_gen: u64,
    /// The last generation HAProxy itself reported during this run, and at which step: what
    /// the fleet record says when HAProxy does not answer at the end.
    seen: Option<(u64, &'static str)>,
    /// Hosts the address service answered `missing` for although the file may hold them (its
    /// push to the worker failed): this run serves them as having no address.
    unpushed: std::collections::BTreeSet<String>,
    /// The worker's address map as the runtime update read it back after its commit (`name
    /// address` lines): what the record counts unresolved routes against on that path.
    worker_addresses: Option<String>,
}

/// What a failure, or a signal, must undo.
#[derive(Debug)]
struct Undo {
    stage: Stage,
    /// Files and directories to remove at the end, whatever happens.
    temps: Vec<PathBuf>,
    /// When this run's reload command returned: a rollback's reload waits a moment after it.
    reloaded_at: Option<Instant>,
    /// The reload command was started and has not returned.
    reload_unfinished: bool,
    /// The live maps as they were before this run installed its own, byte for byte: what
    /// undoing the install puts back.
    maps_before: Option<kept::Saved>,
}

/// What the fleet record and the exit status will say.
#[derive(Debug)]
struct Verdict {
    outcome: Outcome,
    /// The S3 version this run installs.
    version_applied: String,
    /// The generation this run installs.
    generation: u64,
    /// `haproxy -c` judged the new generation and refused it (not: it could not run, or the
    /// run stopped while it ran).
    rejected: bool,
    path_taken: Option<PathTaken>,
    /// Names this run in its log lines and its fleet record.
    apply_id: String,
}

/// Runs the apply with the parameters from the environment; the exit status of the contract.
pub fn main() -> ExitCode {
    let params = match Params::from_env() {
        Ok(params) => params,
        Err(reason) => {
            failed(&reason);
            return ExitCode::from(1);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            failed(&format!("cannot start: {err}; nothing changed"));
            return ExitCode::from(1);
        }
    };
    ExitCode::from(run_to_end(runtime, apply(params)))
}

/// Runs `run` on `runtime`, then shuts the runtime down within [`SHUTDOWN_WAIT`] (a dropped
/// runtime would wait for every blocking thread, however long).
fn run_to_end<T>(runtime: tokio::runtime::Runtime, run: impl Future<Output = T>) -> T {
    let result = runtime.block_on(run);
    runtime.shutdown_timeout(SHUTDOWN_WAIT);
    result
}

impl Run {
    /// A run of `params`, before any step.
    fn new(params: Params) -> Run {
        let dir = params
            .config
            .parent()
            .map_or_else(|| PathBuf::from("/"), Path::to_path_buf);
        let service = Service::of(&params.reload, &params.config);
        Run {
            service,
            paths: Paths {
                last_good: PathBuf::from(format!("{}.last-good", params.config.display())),
                maps_dir: crate::address_map::maps_dir(&params.config),
                dir,
            },
            params,
            s3: None,
            lock: None,
            started: Instant::now(),
            step: "start",
            state: State {
                before: Before::Stopped,
                installed_gen: 0,
                running_gen: 0,
                seen: None,
                unpushed: std::collections::BTreeSet::new(),
                worker_addresses: None,
            },
            undo: Undo {
                stage: Stage::Prepare,
                temps: Vec::new(),
                reloaded_at: None,
                reload_unfinished: false,
                maps_before: None,
            },
            verdict: Verdict {
                outcome: Outcome::Applied,
                version_applied: String::new(),
                generation: 0,
                rejected: false,
                path_taken: None,
                apply_id: record::apply_id(),
            },
        }
    }
}

/// The whole run; returns the exit status.
pub async fn apply(params: Params) -> u8 {
    let mut run = Run::new(params);
    let mut signals = Signals::new();
    let result = {
        let steps = run.steps();
        tokio::pin!(steps);
        tokio::select! {
            result = &mut steps => result,
            name = signals.next() => fail(format!("interrupted by {name}")),
        }
    };
    if result.is_err() && run.undo.reload_unfinished {
        // Stopped while the reload command ran: HAProxy may have been signalled just now.
        run.undo.reloaded_at = Some(Instant::now());
    }
    // The rollback and the record are bounded: a signal now lets them finish, then the
    // apply exits with its code.
    let mut during: Option<&'static str> = None;
    let code = {
        let finish = run.finish(result);
        tokio::pin!(finish);
        loop {
            tokio::select! {
                code = &mut finish => break code,
                name = signals.next(), if during.is_none() => {
                    log("signal", &format!("{name} while finishing: the rollback and the record finish first"));
                    during = Some(name);
                }
            }
        }
    };
    let code = during.map_or(code, signals::exit_code);
    for path in std::mem::take(&mut run.undo.temps) {
        if path.is_dir() {
            let _ = std::fs::remove_dir_all(&path);
        } else {
            let _ = std::fs::remove_file(&path);
        }
    }
    code
}

impl Run {
    fn config(&self) -> &Path {
        &self.params.config
    }

    /// The stats socket of the installed config, if it declares a usable one.
    fn socket(&self) -> Option<RuntimeApi> {
        crate::haproxy::socket_of(self.config()).map(|path| RuntimeApi::new(path, QUESTION_TIMEOUT))
    }

    /// What HAProxy answers on the installed config's socket now, asked again while it is
    /// silent for at most `budget`; a generation it reports is remembered for the record.
    async fn ask(&mut self, budget: Duration) -> Answer {
        let answer = Running::ask(self.config(), budget).await;
        if let Answer::Runs(running) = &answer {
            self.state.seen = Some((running.generation, self.step));
        }
        answer
    }

    /// Whether HAProxy runs now: its socket answers, or the service says so.
    async fn haproxy_runs(&mut self) -> bool {
        match self.ask(QUESTION_TIMEOUT).await {
            Answer::Runs(_) | Answer::Silent(_) => true,
            Answer::NoSocket | Answer::NothingListens => self.service.runs().await.unwrap_or(false),
        }
    }

    /// The run as its stages: each returns the value the next one takes, and `self.undo.stage`
    /// says what a failure from there must undo (see [`Stage`]).
    async fn steps(&mut self) -> Result<(), Failure> {
        self.check_params()?;
        self.take_lock().await?;
        let budget = locked_budget();
        match tokio::time::timeout(budget, self.locked_steps()).await {
            Ok(result) => result,
            Err(_) => fail(format!(
                "the apply's steps did not end within {} s (stopped at step {})",
                budget.as_secs(),
                self.step
            )),
        }
    }

    /// The steps under the lock, within [`LOCKED_BUDGET`] all together.
    async fn locked_steps(&mut self) -> Result<(), Failure> {
        // Asked before the swap, on the socket of the config HAProxy was started with: the new
        // config may name another socket.
        self.read_state().await?;
        let Some(new) = self.fetch().await? else {
            return Ok(());
        };
        let prepared = self.prepare(&new).await?;
        self.pause("check").await;
        self.check(&prepared.maps.check, new.generation).await?;
        self.step = "keep";
        self.keep()?;
        let activation = self.install(&new, &prepared)?;
        self.activate(&new, &prepared, activation).await
    }

    fn check_params(&self) -> Result<(), Failure> {
        if !self.config().is_absolute() {
            return fail(format!(
                "ConfigPath must be an absolute path, got '{}'",
                self.config().display()
            ));
        }
        if !self.paths.dir.is_dir() {
            return fail(format!(
                "the directory of ConfigPath, {}, does not exist",
                self.paths.dir.display()
            ));
        }
        if self.params.reload.is_empty() {
            return fail("ReloadCommand is empty");
        }
        Ok(())
    }

    async fn take_lock(&mut self) -> Result<(), Failure> {
        self.step = "lock";
        let lock_path = PathBuf::from(format!("{}.lock", self.config().display()));
        let waited = Instant::now();
        let wait = hooks::lock_wait();
        match files::lock(&lock_path, wait).await {
            Ok(file) => self.lock = Some(file),
            Err(files::LockError::Busy) => {
                return fail(format!(
                    "another apply held {} for more than {} s",
                    lock_path.display(),
                    wait.as_secs()
                ));
            }
            Err(files::LockError::Open(err)) => {
                return fail(format!("cannot open {}: {err}", lock_path.display()));
            }
        }
        log(
            "lock",
            &format!(
                "acquired {} after {} ms",
                lock_path.display(),
                waited.elapsed().as_millis()
            ),
        );
        Ok(())
    }

    /// What runs before anything changes: the installed and running generations, and whether
    /// HAProxy runs at all. A socket that stays silent leaves the running generation unknown:
    /// the run stops here rather than decide from a guess.
    async fn read_state(&mut self) -> Result<(), Failure> {
        self.step = "state";
        self.state.installed_gen = config::generation_of(self.config());
        self.state.before = match self.ask(SILENT_BUDGET).await {
            Answer::Runs(running) => Before::Runs(Some(running)),
            Answer::Silent(why) => {
                return fail(format!(
                    "HAProxy did not answer on its stats socket within {} s ({why}): the generation it runs is unknown",
                    SILENT_BUDGET.as_secs()
                ));
            }
            Answer::NoSocket | Answer::NothingListens => match self.service.runs().await {
                Ok(true) => {
                    log(
                        "state",
                        &format!(
                            "HAProxy runs but not on a stats socket {} declares (a config without one?): it runs no autoproxy generation, and will be reloaded",
                            self.config().display()
                        ),
                    );
                    Before::Runs(None)
                }
                Ok(false) => Before::Stopped,
                Err(why) => return fail(format!("whether HAProxy runs is unknown: {why}")),
            },
        };
        self.state.running_gen = self
            .state
            .before
            .running()
            .map_or(0, |running| running.generation);
        if self.state.installed_gen != self.state.running_gen
            && self.state.before != Before::Stopped
        {
            log(
                "state",
                &format!(
                    "WARNING: {} holds generation {} but HAProxy runs generation {}: the file is not what runs",
                    self.config().display(),
                    self.state.installed_gen,
                    self.state.running_gen
                ),
            );
        }
        Ok(())
    }

    /// Whether `generation` is skipped: not newer than what runs. Decided by what HAProxy
    /// runs, not by the file: an equal generation is installed again when the file differs
    /// from what runs, which repairs it.
    fn skips(&mut self, generation: u64) -> bool {
        self.step = "compare";
        let skip = generation < self.state.running_gen
            || (generation == self.state.running_gen
                && self.state.installed_gen == self.state.running_gen);
        if skip {
            log(
                "skip",
                &format!(
                    "generation {generation} is not newer than the running generation {}: nothing to do",
                    self.state.running_gen
                ),
            );
            self.verdict.outcome = Outcome::Skipped;
            self.remove_leftovers();
        }
        skip
    }

    /// Remembers which way the generation goes to HAProxy, for the record, and logs it.
    fn taken(&mut self, path: &'static str, why: &str) {
        if path == "reload" {
            log("install", &format!("reloading: {why}"));
        }
        self.verdict.path_taken = Some(PathTaken {
            path,
            why: why.to_owned(),
        });
    }

    /// The reload (or start, when no HAProxy ran), then the wait for a new worker running
    /// `new`.
    async fn reload_and_wait(&mut self, new: &NewConfig) -> Result<(), Failure> {
        self.pause("reload").await;
        let starting = self.state.before == Before::Stopped;
        let replaced = self.state.before.running().map(|r| r.pid);
        self.undo.reload_unfinished = true;
        let finished = self.reload(starting).await;
        self.undo.reload_unfinished = false;
        // Set however the command ended: a rollback's reload waits its settle after it.
        self.undo.reloaded_at = Some(Instant::now());
        let finished = finished?;
        if !finished.success() {
            return fail(format!(
                "the reload command ({}) {}: {}",
                self.reload_words(starting).join(" "),
                finished.status(),
                oneline(&finished.output)
            ));
        }
        log(
            "reload",
            &format!("ran {}", self.reload_words(starting).join(" ")),
        );
        self.pause("verify").await;
        self.step = "running";
        let waited = finish::wait_generation(&new.socket, new.generation, replaced).await;
        match waited {
            Ok(running) => {
                self.state.seen = Some((running.generation, "running"));
                Ok(())
            }
            Err(seen) => fail(format!(
                "HAProxy did not report generation {} from a new worker on {} within {} s (it reports: {seen})",
                new.generation,
                new.socket.display(),
                RUNNING_TIMEOUT.as_secs()
            )),
        }
    }

    /// The end of a run that installed `generation`: HAProxy runs it.
    fn done(&mut self, generation: u64, how: &str) -> Result<(), Failure> {
        self.state.running_gen = generation;
        self.step = "tidy";
        self.tidy(generation);
        log(
            "done",
            &format!(
                "generation {generation} is running, {how} (apply took {} ms, peak memory {})",
                self.started.elapsed().as_millis(),
                crate::proc::own_peak_memory().unwrap_or_else(|| "unknown".to_owned())
            ),
        );
        Ok(())
    }
}

/// Command output squeezed into one short line for a log or failure line.
fn oneline(text: &str) -> String {
    let squeezed = text.split_whitespace().collect::<Vec<_>>().join(" ");
    autoproxy::excerpt(&squeezed, 400)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A blocking thread still waiting when the run ends (a deadline fired around it) does not
    /// hold the apply: the runtime's shutdown gives up on it after [`SHUTDOWN_WAIT`].
    #[test]
    fn the_run_ends_without_waiting_for_a_blocked_thread() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let started = Instant::now();
        let answer = run_to_end(runtime, async {
            let blocked =
                tokio::task::spawn_blocking(|| std::thread::sleep(Duration::from_secs(30)));
            let waited = tokio::time::timeout(Duration::from_millis(100), blocked).await;
            u8::from(waited.is_err())
        });
        let elapsed = started.elapsed();
        assert_eq!(answer, 1);
        assert!(
            elapsed < Duration::from_secs(15),
            "waited {elapsed:?} for the blocked thread"
        );
    }
}
