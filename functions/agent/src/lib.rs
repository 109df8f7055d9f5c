//! autoproxy-agent: the proxy half of autoproxy, one program on every peering-proxy instance
//! (docs/ARCHITECTURE.md, "The proxy agent").
//!
//! * `apply` is what the apply document runs: it installs one generation of the config
//!   (download, verify, check, swap, reload, check, roll back) and writes the fleet record.
//! * `resolve` is the systemd service that keeps the backends' addresses current at a paced
//!   DNS rate, and answers the apply's "resolve these names now".
//!
//! The two never import each other. Below them, the ground floor both stand on: `haproxy`
//! (the runtime client, typed map commands), `control` (both ends of `resolver.sock`), `dns`
//! (the engine, its schedule and knobs, one-shot resolution), `address_map`, `addresses`,
//! `routes`, `own` (this proxy's own address ranges and the fleet's other proxies: no route
//! into itself), `borders` (no route into another member's network, the link-local range or
//! the internet), `record`, `running`, `log`, `sdk` (the AWS SDK's set-up), `unit` (the address
//! service's systemd unit); and
//! the host floor, which imports only itself: `files` (one durable replace), `proc` (one
//! `/proc` reader) and `child` (bounded child processes). Both parse the artifact with
//! [`autoproxy::artifact`], the module the generator
//! writes it with.

pub mod address_map;
pub mod addresses;
pub mod apply;
pub mod borders;
pub mod child;
pub mod control;
pub mod dns;
pub mod files;
pub mod haproxy;
pub mod log;
pub mod own;
pub mod proc;
pub mod record;
pub mod resolve;
pub mod routes;
pub mod running;
pub mod sdk;
pub mod unit;
