//! autoproxy-agent: the proxy half of autoproxy, one program on every peering-proxy instance
//! (docs/ARCHITECTURE.md, "The proxy agent").
//!
//! * `apply` is what the apply document runs: it installs one generation of the config
//!   (download, verify, check, swap, reload, check, roll back) and writes the fleet record.
//! * `resolve` is the systemd service that keeps the backends' addresses current at a paced
//!   DNS rate, and answers the apply's "resolve these names now".
//!
//! Both parse the artifact with [`autoproxy::artifact`], the module the generator writes it with.

pub mod address_map;
pub mod addresses;
pub mod apply;
pub mod haproxy;
pub mod resolve;
pub mod routes;
