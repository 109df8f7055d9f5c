//! `resolver.sock`, the control socket between the two programs: the apply asks the address
//! service to resolve names now ([`crate::addresses::ensure`] is the client end, the service's
//! `resolve::control` the listening end; the protocol is written there). Here, where both
//! find it without importing each other.

/// The control socket, relative to the config's directory.
pub const SOCKET: &str = "autoproxy/resolver.sock";
