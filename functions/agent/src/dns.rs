//! Resolving names on the ground floor, for both programs: the wire format ([`wire`]), the
//! engine that paces every query ([`engine`], its rules in [`schedule`], its settings in
//! [`knobs`]) and the one-shot resolution an apply runs when no address service answers
//! ([`once`]). The address service (`resolve`) drives the same engine for as long as it runs,
//! so an apply's queries hold the service's pacing and rules.

pub mod engine;
pub mod knobs;
pub mod once;
pub mod schedule;
pub mod wire;
