//! autoproxy: keeps a fleet of HAProxy peering proxies in step with Route53.
//!
//! The pure core (no I/O): [`names`], [`rules`], [`model`], [`render`], [`artifact`], [`ownership`],
//! [`diff`], [`fleet`]. The edges that talk to AWS are few and named for what they talk to.

pub mod artifact;
pub mod diff;
pub mod discovery;
pub mod fleet;
pub mod manifest;
pub mod metrics;
pub mod model;
pub mod names;
pub mod ownership;
pub mod publish;
pub mod ratelimit;
pub mod render;
pub mod route53;
pub mod rules;
pub mod s3;
pub mod settings;
