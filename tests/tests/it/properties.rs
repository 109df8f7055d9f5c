//! Property tests: outside input, generated at volume, through the pure paths, checked for
//! what must hold whatever arrives.
//!
//! * Route53 data → `rules::zone_routes` → `rules::merge_claims` → the embedded template: nothing
//!   panics or fails to render, only plain host names reach the config (every byte printable
//!   ASCII or a newline, no line or field added), and every rejected name is a warning. A
//!   well-formed zone always gives its route, however Route53 spells it.
//! * Invocation payloads → the generator's trigger and configure's `dispatches` /
//!   `is_fleet_request`: nothing panics, every refusal says what was expected, an accepted zone
//!   hint carries a well-formed account and zone id.
//! * Stored manifests → `Manifest::from_json` → the sweep's merge → merge_claims → render: nothing
//!   panics, no line is injected, and no byte outside the allowed set is rendered
//!   (`manifest_values_reach_the_config_only_when_clean`): a manifest whose values are
//!   malformed is refused on load, and a stored route that is not what its rule makes of its
//!   zone is dropped on load, never rendered.
//! * Random small estates over several runs, with rules changes (`holders`): a name never
//!   moves from the zone that routed it while that zone claims it or within the grace, and no
//!   route points at a proxy name.
//! * `ROUTING_RULES` → `rules::parse_rules`: nothing panics, and every refusal of a list of rule
//!   objects names its rule (index, and id once the id passed) and a field.
//!
//! The seed is fixed, so every run tries the same inputs and a failure reproduces;
//! `PROPTEST_RNG_SEED=<u64>` tries others and `PROPTEST_CASES=<n>` overrides every property's
//! case count. Each property prints how many cases it ran (`-- --nocapture` shows it) and, on the
//! fixed seed, fails if a branch it tallies (a refusal kind, a rendered route) came up in none.
// The printed counts are part of the report: how much input each property saw.
#![allow(clippy::print_stdout)]

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::SocketAddr;

use autoproxy::artifact::{self, MapFiles, ROUTE_LINE, SUFFIX_LINE};
use autoproxy::discovery::{self, Matching, Scope};
use autoproxy::manifest::{Manifest, ZoneEntry, zone_key};
use autoproxy::model::{RecordSet, Route, SniMatch, Zone, ZoneKey, ZoneRecords};
use autoproxy::names::{HostName, normalize};
use autoproxy::ownership;
use autoproxy::publish;
use autoproxy::render::{DEFAULT_TEMPLATE, RenderInput, RenderOptions, Renderer};
use autoproxy::rules::{DEFAULT_RULES, merge_claims, zone_routes};
use autoproxy::settings::IgnoreZones;
use autoproxy::warnings::Warning;
use autoproxy_configure::handler::{Dispatch, dispatches, is_fleet_request};
use autoproxy_generate::trigger::{self, ROUTE53_EVENTS, Trigger, TriggerError};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;
use proptest::string::string_regex;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};
use serde_json::{Value, json};

/// The seed every property starts from unless `PROPTEST_RNG_SEED` says otherwise.
const SEED: u64 = 0x6175_746f_7072_6f78;
const PROXY: &str = "peering-proxy.tools.example.com";
const CONFIG_KEY: &str = "haproxy/haproxy.cfg";
const GENERATED_AT: &str = "2026-11-23T03:14:02Z";
const NOW: u64 = 1_795_403_642;

mod clean;
mod events;
mod generators;
mod holders;
mod manifests;
mod names;
mod route53;
mod rules;
mod runner;
mod s3_events;

use clean::*;
use generators::*;
use names::*;
use runner::*;
