//! The requests of the control socket while their names resolve: each is answered once all
//! its names ended their turn (or its wait is up), and only after the map file holds what the
//! answer says.

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

/// Every request not answered yet.
#[derive(Debug, Default)]
pub struct Wants {
    waiting: Vec<Waiter>,
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

    /// Answers the requests whose names all settled or whose time is up, writing the map
    /// first if it changed; whether it answered any.
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
            let _ = waiter.reply.send(lines);
        }
        true
    }

    /// The earliest time a request must be answered by.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.waiting.iter().map(|w| w.deadline).min()
    }
}
