//! The requests of the control socket while their names resolve: each is answered once all
//! its names ended their turn (or its wait is up), and only after the map file holds what the
//! answer says and a push to the running worker that started after that has ended. So an
//! apply that asked gets an answer when the worker holds the addresses too: the service is
//! the one writer of the worker's address map while it runs.

use std::time::Instant;

use tokio::sync::oneshot;

use super::output::{Output, Tried};
use crate::control::Want;
use crate::dns::engine::Engine;

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
        engine.want(&want.names, &want.accounts, now);
        self.waiting.push(Waiter {
            names: want.names,
            deadline: now + want.wait,
            reply: want.reply,
        });
    }

    /// Readies the answers of the requests whose names all settled or whose time is up,
    /// writing the map first if it changed ([`Wants::push_wanted`] then says a push is due).
    /// Never waits for the map's lock: while an apply holds it, the requests whose time is
    /// not up wait for a later turn.
    pub fn answer(&mut self, engine: &mut Engine, output: &mut Output, now: Instant) {
        let ready: Vec<bool> = self
            .waiting
            .iter()
            .map(|w| now >= w.deadline || w.names.iter().all(|n| engine.settled(n)))
            .collect();
        if !ready.contains(&true) {
            return;
        }
        // `ok` says the file holds the address: not when it could not be written.
        let written = if engine.dirty {
            output.try_write(engine, now)
        } else {
            Tried::Wrote
        };
        let mut ready = ready.into_iter();
        let (done, waiting): (Vec<Waiter>, Vec<Waiter>) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition(|w| {
                let ready = ready.next().unwrap_or(false);
                if written == Tried::Busy {
                    now >= w.deadline
                } else {
                    ready
                }
            });
        self.waiting = waiting;
        if done.is_empty() {
            return;
        }
        let unwritten = written != Tried::Wrote;
        for waiter in done {
            let lines = waiter
                .names
                .iter()
                .map(|name| match engine.answer(name) {
                    Ok(_) if unwritten => format!(
                        "missing {name} {} could not be written",
                        output.path().display()
                    ),
                    Ok(address) => format!("ok {name} {address}"),
                    Err(why) => format!("missing {name} {why}"),
                })
                .collect();
            self.ready.push((waiter.reply, lines));
        }
    }

    /// Whether answers wait for a push to start.
    pub fn push_wanted(&self) -> bool {
        !self.ready.is_empty()
    }

    /// A push started: the ready answers go when it ends.
    pub fn push_started(&mut self) {
        self.in_push.append(&mut self.ready);
    }

    /// The push ended: its answers go. An `ok` says the worker holds the address, so when
    /// the push failed (`failed`: why) each becomes `missing`: the apply then holds the route
    /// and counts it unresolved, and the next push tries again. With no worker to push to
    /// (`failed` is None and nothing was pushed) the file is what a starting worker loads.
    pub fn push_ended(&mut self, failed: Option<&str>) {
        for (reply, mut lines) in self.in_push.drain(..) {
            if let Some(why) = failed {
                for line in &mut lines {
                    if let Some(name) = line
                        .strip_prefix("ok ")
                        .and_then(|rest| rest.split_whitespace().next())
                    {
                        *line = format!("missing {name} the push to HAProxy failed: {why}");
                    }
                }
            }
            let _ = reply.send(lines);
        }
    }

    /// The earliest time a request must be answered by.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.waiting.iter().map(|w| w.deadline).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(failed: Option<&str>) -> Vec<String> {
        let (reply, answer) = oneshot::channel();
        let mut wants = Wants::default();
        wants.in_push.push((
            reply,
            vec![
                "ok a.example 10.0.0.1".to_owned(),
                "missing b.example NXDOMAIN".to_owned(),
            ],
        ));
        wants.push_ended(failed);
        answer.blocking_recv().unwrap_or_default()
    }

    /// The loop's thread never waits for the map's lock: while another writer holds it, a
    /// request whose names settled waits for a later turn instead of an `ok` the file does
    /// not back, and is answered once the lock is free.
    #[test]
    fn an_answer_waits_for_the_lock_on_a_later_turn_not_on_the_loop() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = crate::address_map::MapFile::at(&dir.path().join("addresses.map"));
        let start = Instant::now();
        let mut engine = Engine::new(crate::dns::knobs::Knobs::default());
        let (mut output, _) = Output::open(file.clone(), &mut engine, start);
        let address: std::net::IpAddr = [10, 0, 0, 1].into();
        engine.load(&[("a.example".to_owned(), address)].into(), start);
        engine.dirty = true;
        let (reply, mut answer) = oneshot::channel();
        let mut wants = Wants::default();
        let want = Want {
            names: vec!["a.example".to_owned()],
            accounts: Default::default(),
            wait: std::time::Duration::from_secs(60),
            reply,
        };
        wants.add(want, &mut engine, start);

        let held = file.lock(crate::address_map::MAP_LOCK_WAIT).expect("locks");
        wants.answer(&mut engine, &mut output, Instant::now());
        assert!(
            !wants.push_wanted(),
            "nothing readied under another writer's lock"
        );
        assert!(engine.dirty, "written under another writer's lock");
        assert!(output.next_write(&engine).is_some_and(|at| at > start));
        drop(held);
        wants.answer(&mut engine, &mut output, Instant::now());
        assert!(wants.push_wanted(), "readied once the lock is free");
        wants.push_started();
        wants.push_ended(None);
        assert_eq!(
            answer.try_recv().expect("answered"),
            ["ok a.example 10.0.0.1"]
        );
    }

    #[test]
    fn an_ok_stands_only_when_the_push_did_not_fail() {
        assert_eq!(
            ended(None),
            ["ok a.example 10.0.0.1", "missing b.example NXDOMAIN"]
        );
        assert_eq!(
            ended(Some("refused")),
            [
                "missing a.example the push to HAProxy failed: refused",
                "missing b.example NXDOMAIN"
            ]
        );
    }
}
