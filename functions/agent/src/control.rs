//! `resolver.sock`, the control socket between the two programs, both ends: an apply asks the
//! address service to resolve names now ([`ask()`], which [`crate::addresses::ensure`] calls),
//! and the service answers ([`Control`]). A Unix stream in `<config dir>/autoproxy/`, root
//! only. One request per connection:
//!
//! ```text
//! client:  want <name> [<accounts>]  one line per name (at most MAX_WANTED); accounts: whose
//!                               routes will send to it, comma-separated (at most
//!                               borders::MAX_ACCOUNTS), judged by them (crate::borders)
//!          go <milliseconds>    how long the client waits for the answers
//! server:  ok <name> <address>  one line per name, in the order asked, once the map file
//!          missing <name> <why>   holds the addresses and the running worker has them
//!          done
//!          error <why>          instead, for a request it cannot read
//! ```
//!
//! A name the installed config does not route yet is judged by the accounts its line names
//! (an apply names them from the config it is about to install), so its address reaches the
//! map only where each of those accounts' routes may point. A service of an earlier version
//! refuses a line with accounts (`error …`): that apply's new hosts stay missing, held until
//! the service, restarted onto this version at the apply's end, resolves them.
//!
//! The service keeps such wanted names (and refreshes them) for
//! [`crate::dns::engine::WANTED_KEEP`] even though the installed config does not name them yet.

mod ask;
mod listen;

use std::time::Duration;

pub use ask::{Answer, Asked, ask, connect};
pub use listen::{Control, Want};

/// The control socket, relative to the config's directory.
pub const SOCKET: &str = "autoproxy/resolver.sock";
/// The most names one request may want: above the largest generation measured (10,000
/// routes, each host at most once), and far above what an apply's 2 s address budget can
/// resolve (1,600 names at the fill pace). It bounds what a connection holds: 16,384 names
/// of at most 253 bytes with their accounts, about 8 MB, times [`MAX_CONNECTIONS`]. An apply that wants more asks
/// for the first ones; the rest are missing, held until the service resolves them.
pub const MAX_WANTED: usize = 16_384;
/// The most connections one of the address service's sockets serves at once (this one and
/// the stats listener's, [`crate::resolve`]'s HTTP answerer): past it, the service takes no
/// more until one ends, and a client finds it busy.
pub const MAX_CONNECTIONS: usize = 16;
/// How long a client may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest wait a client may ask for.
pub const MAX_WAIT: Duration = Duration::from_secs(120);
/// The longest request line: `want `, a 253-byte name and [`crate::borders::MAX_ACCOUNTS`]
/// account ids of 12 digits with their commas, with room to spare.
const MAX_LINE: usize = 512;

/// Whose routes will send to each wanted name: name → account ids.
pub type Accounts = std::collections::BTreeMap<String, std::collections::BTreeSet<String>>;
