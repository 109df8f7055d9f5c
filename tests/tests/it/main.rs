//! The one integration-test binary: golden configs, moto server, real HAProxy.
// In tests a panic is the failure report: unwrap on test fixtures is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod apply;
mod budget;
mod by_hand;
mod configure;
mod dataplane;
mod day_two;
mod e2e;
mod fleet;
mod forwarding;
mod generate;
mod golden;
mod haproxy_version;
mod least_privilege;
mod members;
mod metrics;
mod moto;
mod ownership;
mod properties;
mod publisher;
mod ratelimit;
mod release_bundle;
mod resolver;
mod runtime_api;
mod template;
