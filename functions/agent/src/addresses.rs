//! Addresses of the routes' hosts before an apply installs them: [`ensure`], which the apply
//! calls before it swaps in a generation so that every route it installs has its address in
//! the address map ([`crate::address_map`]) when the apply returns.
//!
//! One DNS client per instance keeps the query budget, so [`ensure`] first asks the running
//! address service over its control socket ([`crate::control`]). When no service answers,
//! [`ensure`] resolves the names itself with the service's own engine and pacing
//! ([`crate::dns::once`]), and merges them into the map file under the lock the service also
//! takes when it writes.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::address_map::MapFile;
use crate::borders::Fences;
use crate::control::{self, Asked, SOCKET};
use crate::dns::once::resolve_once;
use crate::own::Own;

/// What [`ensure`] achieved.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Ensured {
    /// Names that have an address in the address map now.
    pub resolved: usize,
    /// Names that still have none, each with why.
    pub missing: Vec<(String, String)>,
    /// Who resolved them.
    pub by: By,
}

/// Who resolved the names of an [`ensure`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum By {
    /// Nobody: nothing was asked.
    #[default]
    Nobody,
    /// The running resolver, over its control socket.
    Resolver,
    /// [`ensure`] itself: no resolver answered.
    Itself,
}

/// Makes sure each of `names` (the hosts new to an apply's generation) has an address in
/// `<config dir>/autoproxy/addresses.map` before returning, within `budget` (see the module
/// doc for how); a name that resolves to this proxy (`judges.own`), or where a route of the
/// config it is for may not point (`judges.fences`, [`crate::borders`]), gets none, whoever
/// resolves it.
/// The service is asked only for `names`, never for `theirs` (the installed config's hosts,
/// which it reads from that file and resolves at its own pace), even when `names` is empty.
/// When no service listens, nobody else resolves `theirs`: they are resolved with `names`, in
/// one pass within `budget`.
pub async fn ensure(
    config_dir: &Path,
    names: &[String],
    theirs: &[String],
    nameservers: &[SocketAddr],
    judges: Judges<'_>,
    budget: Duration,
) -> Ensured {
    let deadline = Instant::now() + budget;
    let mut ensured = Ensured::default();
    let mut asked = Vec::new();
    for name in names {
        match autoproxy::names::HostName::parse(name) {
            Ok(host) => asked.push(host.as_str().to_owned()),
            Err(err) => ensured.missing.push((name.clone(), err.to_string())),
        }
    }
    asked.sort();
    asked.dedup();
    let socket = config_dir.join(SOCKET);
    let answered = if !asked.is_empty() {
        control::ask(&socket, &asked, judges.fences, deadline).await
    } else if theirs.is_empty() {
        return ensured;
    } else {
        // Nothing new to ask: a service that listens resolves `theirs` at its pace (asking it
        // would only hear "still resolving" during a fill); without one, they are resolved here.
        match control::connect(&socket).await {
            Err(Asked::NoResolver) => Err(Asked::NoResolver),
            Ok(_) | Err(Asked::Busy(_) | Asked::Failed(_)) => {
                ensured.by = By::Resolver;
                return ensured;
            }
        }
    };
    match answered {
        Ok(answers) => {
            ensured.by = By::Resolver;
            for (name, answer) in answers {
                match answer {
                    Ok(_) => ensured.resolved += 1,
                    Err(why) => ensured.missing.push((name, why)),
                }
            }
        }
        Err(Asked::NoResolver) => {
            let here = Here {
                config_dir,
                nameservers,
                judges,
                deadline,
            };
            here.resolve(asked, theirs, &mut ensured).await;
        }
        Err(Asked::Busy(why) | Asked::Failed(why)) => {
            ensured.by = By::Resolver;
            ensured
                .missing
                .extend(asked.into_iter().map(|name| (name, why.clone())));
        }
    }
    ensured
}

/// What the addresses of an apply's names are judged by: this proxy's own addresses and
/// names, and the borders of the config the apply installs.
#[derive(Debug, Clone, Copy)]
pub struct Judges<'a> {
    pub own: &'a Own,
    pub fences: &'a Fences,
}

/// Where an apply resolves names itself, when no address service listens.
struct Here<'a> {
    config_dir: &'a Path,
    nameservers: &'a [SocketAddr],
    judges: Judges<'a>,
    deadline: Instant,
}

impl Here<'_> {
    /// Resolves `asked` and `theirs` in one pass and merges what resolved into the address
    /// map; each name counted in `ensured` as resolved or missing, and why.
    async fn resolve(&self, asked: Vec<String>, theirs: &[String], ensured: &mut Ensured) {
        ensured.by = By::Itself;
        let mut wanted = asked;
        let theirs = theirs
            .iter()
            .filter_map(|n| autoproxy::names::HostName::parse(n).ok());
        wanted.extend(theirs.map(|host| host.as_str().to_owned()));
        wanted.sort();
        wanted.dedup();
        let results = resolve_unlooped(&wanted, self.nameservers, self.judges, self.deadline).await;
        let map = MapFile::in_dir(self.config_dir);
        let found: Vec<(String, IpAddr)> = results
            .iter()
            .filter_map(|(name, result)| result.as_ref().ok().map(|a| (name.clone(), *a)))
            .collect();
        // The lock may be held by the service's write: waited for off the runtime thread,
        // until the deadline at most (and the map's own bound).
        let merging = map.clone();
        let wait = self
            .deadline
            .saturating_duration_since(Instant::now())
            .min(crate::address_map::MAP_LOCK_WAIT);
        let merged = tokio::task::spawn_blocking(move || merging.merge(&found, wait))
            .await
            .unwrap_or_else(|err| Err(std::io::Error::other(err.to_string())));
        match merged {
            Ok(()) => {
                for (name, result) in results {
                    match result {
                        Ok(_) => ensured.resolved += 1,
                        Err(why) => ensured.missing.push((name, why)),
                    }
                }
            }
            Err(err) => {
                let why = format!("cannot write {}: {err}", map.path().display());
                ensured
                    .missing
                    .extend(results.into_iter().map(|(name, _)| (name, why.clone())));
            }
        }
    }
}

/// [`resolve_once`] of `wanted` and of the proxy's own names; a name that resolves to this
/// proxy, or where a route to it may not point, has no address, and says why.
async fn resolve_unlooped(
    wanted: &[String],
    nameservers: &[SocketAddr],
    judges: Judges<'_>,
    deadline: Instant,
) -> Vec<(String, Result<IpAddr, String>)> {
    let own = judges.own;
    let mut asked = wanted.to_vec();
    asked.extend(own.names.iter().cloned());
    let mut results = resolve_once(&asked, nameservers, deadline).await;
    let resolved: std::collections::BTreeMap<String, Vec<IpAddr>> = results
        .iter()
        .filter(|(name, _)| own.names.contains(name))
        .filter_map(|(name, result)| Some((name.clone(), vec![*result.as_ref().ok()?])))
        .collect();
    results.truncate(wanted.len());
    for (name, result) in &mut results {
        if let Ok(address) = result
            && let Some(why) = own
                .looped(name, *address, &resolved)
                .or_else(|| judges.fences.refused(name, *address, None))
        {
            *result = Err(why);
        }
    }
    results
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn with_no_resolver_and_no_nameserver_listening_ensure_gives_up_at_once() {
        let dir = tempfile::tempdir().expect("temp dir");
        let closed = std::net::UdpSocket::bind("127.0.0.1:0")
            .and_then(|s| s.local_addr())
            .expect("a free port");
        let started = Instant::now();
        let ensured = ensure(
            dir.path(),
            &["a.example".to_owned(), "bad name".to_owned()],
            &[],
            &[closed],
            Judges {
                own: &Own::default(),
                fences: &Fences::default(),
            },
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(ensured.by, By::Itself);
        assert_eq!(ensured.resolved, 0);
        assert_eq!(ensured.missing.len(), 2, "{ensured:?}");
        let why = |name: &str| {
            ensured
                .missing
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, why)| why.clone())
                .unwrap_or_default()
        };
        assert!(why("a.example").contains("refused"), "{ensured:?}");
        assert!(why("bad name").contains("host name"), "{ensured:?}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "no waiting out time-outs: {:?}",
            started.elapsed()
        );
    }
}
