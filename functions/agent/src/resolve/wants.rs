//! The requests of the control socket while their names resolve: each is answered once all
//! its names ended their turn (or its wait is up), and only after the map file holds what the
//! answer says and a push to the running worker that started after that has ended. So an
//! apply that asked gets an answer when the worker holds the addresses too: the service is
//! the one writer of the worker's address map while it runs.

use std::time::Instant;

use tokio::sync::oneshot;

use super::control::Want;
use super::engine::Engine;
use super::output::Output;

/// One request, waiting for its names.
#[derive(Debug)]
struct Waiter {
    names: Vec<String>,
    deadline: Instant,
    reply: oneshot::Sender<Vec<String>>,
}

/// An answer, and where it goes.
type Reply = (oneshot::Sender<Vec<String>>, Vec<String>);

/// Every request not answered yet.
#[derive(Debug, Default)]
pub struct Wants {
    waiting: Vec<Waiter>,
    /// Answered and written to the file, waiting for a push to start.
    ready: Vec<Reply>,
    /// Waiting for the push in flight to end.
    in_push: Vec<Reply>,
}

impl Wants {
    /// Takes `want` in: its names are resolved first, at the cap.
    pub fn add(&mut self, want: Want, engine: &mut Engine, now: Instant) {
        engine.want(&want.names, now);
        self.waiting.push(Waiter {
            names: want.names,
            deadline: now + want.wait,
            reply: want.reply,
        });
    }

    /// Readies the answers of the requests whose names all settled or whose time is up,
    /// writing the map first if it changed; whether it readied any (a push is due then).
    pub fn answer(&mut self, engine: &mut Engine, output: &mut Output, now: Instant) -> bool {
        let (done, waiting): (Vec<Waiter>, Vec<Waiter>) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition(|w| now >= w.deadline || w.names.iter().all(|n| engine.settled(n)));
        self.waiting = waiting;
        if done.is_empty() {
            return false;
        }
        if engine.dirty {
            output.write(engine, now);
        }
        for waiter in done {
            let lines = waiter
                .names
                .iter()
                .map(|name| match engine.answer(name) {
                    Ok(address) => format!("ok {name} {address}"),
                    Err(why) => format!("missing {name} {why}"),
                })
                .collect();
            self.ready.push((waiter.reply, lines));
        }
        true
    }

    /// Whether answers wait for a push to start.
    pub fn push_wanted(&self) -> bool {
        !self.ready.is_empty()
    }

    /// A push started: the ready answers go when it ends.
    pub fn push_started(&mut self) {
        self.in_push.append(&mut self.ready);
    }

    /// The push ended (whether or not the worker took it: a worker that does not answer is
    /// reloaded by the apply, and loads the file): its answers go.
    pub fn push_ended(&mut self) {
        for (reply, lines) in self.in_push.drain(..) {
            let _ = reply.send(lines);
        }
    }

    /// The earliest time a request must be answered by.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.waiting.iter().map(|w| w.deadline).min()
    }
}
