//! autoproxy-resolver against a counting DNS server and a real HAProxy on loopback: names get
//! their addresses in the map file and in the running worker, changes follow within a refresh,
//! failed lookups keep the last address, a reload loses nothing, and the query rate never
//! exceeds the cap.
#![allow(clippy::print_stdout)]

mod answers;
mod changes;
mod ensure;
mod fixture;
mod observe;
mod rate;
mod service;
