//! What the address service shows of the instance: `/ready` and `/agent/metrics` on its HTTP
//! socket (which HAProxy's stats listener forwards to), and the per-instance CloudWatch
//! metrics (docs/ARCHITECTURE.md, "The data plane, observed").
//!
//! The loop only stores its figures ([`figures`]) with [`Observer::update`]; everything that
//! waits (HTTP clients, HAProxy's answers, CloudWatch) happens in tasks of their own that read
//! them, so a slow client, a busy worker or an unreachable CloudWatch never holds up the
//! resolving or the pushing.

pub mod cloudwatch;
pub mod figures;
pub mod http;
pub mod probe;
pub mod prometheus;
pub mod publisher;
pub mod ready;
pub mod socket;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use super::config::Installed;
use crate::dns::engine::Engine;
use crate::log::log;
use figures::{Figures, FirstPass, RouteHosts, Shared};
use http::Response;
use probe::Probe;

/// How often a socket that could not be bound is tried again.
const BIND_RETRY: Duration = Duration::from_secs(10);

/// The map the worker is brought to.
type Addresses = Arc<BTreeMap<Arc<str>, IpAddr>>;

/// How many held hosts a log line names.
const HELD_SHOWN: usize = 5;

/// `: host (why), …` for the first [`HELD_SHOWN`] hosts without an address in `written`.
fn explain_held(hosts: &RouteHosts, written: &Addresses, engine: &Engine) -> String {
    let held: Vec<(&str, u64)> = hosts.without_address(written).collect();
    if held.is_empty() {
        return String::new();
    }
    let mut shown: Vec<String> = held
        .iter()
        .take(HELD_SHOWN)
        .map(|(name, routes)| {
            let why = match engine.answer(name) {
                Ok(_) => "its address is not written yet".to_owned(),
                Err(why) => why,
            };
            let plural = if *routes == 1 { "" } else { "s" };
            format!("{name} ({routes} route{plural}: {why})")
        })
        .collect();
    if held.len() > HELD_SHOWN {
        shown.push(format!("and {} more hosts", held.len() - HELD_SHOWN));
    }
    format!(": {}", shown.join(", "))
}

/// Answers the HTTP socket's requests from the shared figures.
#[derive(Debug, Clone)]
pub struct Answerer {
    figures: Shared,
    probe: Arc<Probe>,
    config_dir: PathBuf,
}

impl Answerer {
    /// The answer to `GET path`.
    pub async fn get(&self, path: &str) -> Response {
        let figures = self.figures.get();
        let seen = self.probe.look(figures.stats_socket.as_deref()).await;
        let now = Instant::now();
        let reasons = ready::reasons(&figures, &seen, now);
        match path {
            "/ready" if reasons.is_empty() => Response::text(200, "ready\n"),
            "/ready" => Response::text(503, format!("not ready:\n{}\n", reasons.join("\n"))),
            "/agent/metrics" => {
                let last_apply = crate::record::read_local(&self.config_dir);
                let body = prometheus::render(&prometheus::Exposition {
                    figures: &figures,
                    haproxy: &seen,
                    last_apply: last_apply.as_ref(),
                    ready: reasons.is_empty(),
                    now,
                });
                Response {
                    status: 200,
                    content_type: prometheus::CONTENT_TYPE,
                    body,
                }
            }
            _ => Response::text(
                404,
                "not found: this socket serves /ready and /agent/metrics\n",
            ),
        }
    }
}

/// The HTTP socket: where the config wants it (path and group) and what is bound.
#[derive(Debug)]
enum Endpoint {
    None,
    Serving {
        wanted: (PathBuf, Option<u32>),
        bound: socket::Bound,
        task: JoinHandle<()>,
    },
    Failed {
        wanted: (PathBuf, Option<u32>),
        retry_at: Instant,
    },
}

/// The figures the loop keeps, the HTTP socket and the CloudWatch publisher.
#[derive(Debug)]
pub struct Observer {
    figures: Shared,
    answerer: Answerer,
    hosts: RouteHosts,
    /// The map the unresolved routes were last counted against, and their count then.
    counted: Option<(Addresses, u64)>,
    /// The count of unresolved routes the log last explained.
    explained: u64,
    /// Whether an installed config (one with a generation) was read.
    installed: bool,
    first_pass: FirstPass,
    endpoint: Endpoint,
    publisher: Option<JoinHandle<()>>,
}

impl Observer {
    /// Starts observing the service for `config`; publishes to CloudWatch every `metrics`
    /// (none: off).
    pub fn start(
        config: &Path,
        refresh: Duration,
        metrics: Option<Duration>,
        now: Instant,
    ) -> Observer {
        let figures = Shared::new(Figures::new(config.to_path_buf(), refresh, now));
        let probe = Arc::new(Probe::default());
        let publisher = match metrics {
            Some(period) => Some(publisher::spawn(
                period,
                figures.clone(),
                Arc::clone(&probe),
            )),
            None => {
                log(format_args!(
                    "CloudWatch metrics off (AUTOPROXY_METRICS_SECONDS=0)"
                ));
                None
            }
        };
        Observer {
            answerer: Answerer {
                figures: figures.clone(),
                probe,
                config_dir: config.parent().unwrap_or(Path::new("/")).to_path_buf(),
            },
            figures,
            hosts: RouteHosts::default(),
            counted: None,
            explained: 0,
            installed: false,
            first_pass: FirstPass::NotStarted,
            endpoint: Endpoint::None,
            publisher,
        }
    }

    /// Takes in what the installed config holds now.
    pub fn follow(&mut self, installed: &Installed, now: Instant) {
        self.hosts = installed.routes.clone();
        self.counted = None;
        self.installed |= installed.generation.is_some();
        self.figures.update(|f| {
            f.installed_generation = installed.generation;
            f.stats_socket.clone_from(&installed.stats_socket);
            f.routes = self.hosts.routes;
        });
        if let Some(path) = &installed.unsafe_agent_socket {
            log(format_args!(
                "ignored agent socket {path:?}: expected a plain absolute path"
            ));
        }
        let wanted = installed
            .agent_socket
            .clone()
            .map(|path| (path, installed.worker_group));
        self.serve(wanted, now);
    }

    /// Stores the loop's figures (every turn of the loop: a few stores; the routes without an
    /// address are counted again only when the map changed); `pushed`: the last push that
    /// ended brought the worker to `written` (and put the held routes in).
    pub fn update(&mut self, engine: &mut Engine, written: &Addresses, pushed: bool, now: Instant) {
        // The worker holds the engine's map: written, and pushed.
        let pushed = pushed && !engine.dirty;
        let unresolved = self.count_unresolved(written);
        self.first_pass = self.next_first_pass(engine, pushed, now);
        // Explained once the first pass is over: before, most hosts are merely not asked yet.
        if self.first_pass == FirstPass::Over && unresolved != self.explained {
            self.explained = unresolved;
            log(format_args!(
                "held routes: {unresolved} of {} routes have a host without an address{}",
                self.hosts.routes,
                explain_held(&self.hosts, written, engine)
            ));
        }
        let lag = engine.lag(now);
        let first_pass = self.first_pass;
        let by_account: Vec<(String, u64)> = engine
            .sent_by_account()
            .map(|(account, sent)| (account.to_owned(), sent))
            .collect();
        self.figures.update(|f| {
            f.updated = now;
            f.names = u64::try_from(engine.len()).unwrap_or(u64::MAX);
            f.queries_total = engine.totals.queries;
            f.queries_by_account = by_account;
            f.failures_total = engine.totals.failed;
            f.timeouts_total = engine.totals.timeouts;
            f.fill_backoffs_total = engine.totals.backoffs;
            f.pace_qps = engine.pace();
            f.lag = lag;
            f.last_answer = engine.last_answer;
            f.first_pass = first_pass;
        });
        if let Endpoint::Failed { wanted, retry_at } = &self.endpoint
            && now >= *retry_at
        {
            let wanted = wanted.clone();
            self.endpoint = Endpoint::None;
            self.bind(wanted, now, false);
        }
    }

    /// The routes whose host has no address in `written`: counted again only when it is
    /// another map than last time.
    fn count_unresolved(&mut self, written: &Addresses) -> u64 {
        if let Some((counted, unresolved)) = &self.counted
            && Arc::ptr_eq(counted, written)
        {
            return *unresolved;
        }
        let unresolved = self.hosts.unresolved(written);
        self.figures.update(|f| f.unresolved_routes = unresolved);
        self.counted = Some((Arc::clone(written), unresolved));
        unresolved
    }

    /// The first pass as of `now`: it starts when an installed config was read and ends once
    /// every name ended a turn and the worker holds what they found (`pushed`), or the
    /// warm-up is over (logged once).
    fn next_first_pass(&self, engine: &Engine, pushed: bool, now: Instant) -> FirstPass {
        let pending = u64::try_from(engine.first_pending()).unwrap_or(u64::MAX);
        let next = match self.first_pass {
            FirstPass::NotStarted if !self.installed => return FirstPass::NotStarted,
            FirstPass::NotStarted => FirstPass::Running {
                since: now,
                pending,
                pushed,
            },
            FirstPass::Running { since, .. } => FirstPass::Running {
                since,
                pending,
                pushed,
            },
            FirstPass::Over => return FirstPass::Over,
        };
        if !ready::first_pass_over(next, now) {
            return next;
        }
        if let FirstPass::Running { since, pending, .. } = next {
            log(format_args!(
                "first pass over the hosts over after {:.1}s: {pending} names still without a first answer{}{}",
                now.saturating_duration_since(since).as_secs_f64(),
                if pending > 0 {
                    " (warm-up over: their routes are held)"
                } else {
                    ""
                },
                if pushed {
                    ""
                } else {
                    "; HAProxy does not hold every address found yet (warm-up over)"
                }
            ));
        }
        FirstPass::Over
    }

    /// Serves on `wanted` (path and group) from now on; nothing when it is none.
    fn serve(&mut self, wanted: Option<(PathBuf, Option<u32>)>, now: Instant) {
        let current = match &self.endpoint {
            Endpoint::Serving { wanted, .. } | Endpoint::Failed { wanted, .. } => Some(wanted),
            Endpoint::None => None,
        };
        if current == wanted.as_ref() {
            return;
        }
        self.close_socket();
        if let Some(wanted) = wanted {
            self.bind(wanted, now, true);
        }
    }

    fn bind(&mut self, wanted: (PathBuf, Option<u32>), now: Instant, first: bool) {
        match socket::bind(&wanted.0, wanted.1) {
            Ok((listener, bound)) => {
                log(format_args!(
                    "serving /ready and /agent/metrics on {}",
                    bound.path.display()
                ));
                let task = tokio::spawn(http::serve(listener, self.answerer.clone()));
                self.endpoint = Endpoint::Serving {
                    wanted,
                    bound,
                    task,
                };
            }
            Err(err) => {
                if first {
                    log(format_args!(
                        "cannot serve /ready and /agent/metrics yet ({err}); trying again every {}s",
                        BIND_RETRY.as_secs()
                    ));
                }
                self.endpoint = Endpoint::Failed {
                    wanted,
                    retry_at: now + BIND_RETRY,
                };
            }
        }
    }

    fn close_socket(&mut self) {
        if let Endpoint::Serving { bound, task, .. } =
            std::mem::replace(&mut self.endpoint, Endpoint::None)
        {
            task.abort();
            bound.remove();
        }
    }

    /// Stops serving and publishing; removes the socket.
    pub fn close(&mut self) {
        self.close_socket();
        if let Some(publisher) = self.publisher.take() {
            publisher.abort();
        }
    }
}
