//! The installed config as the address service sees it: what it reads from the text (names,
//! nameservers, the stats socket) and the watch on the file (inode, size and mtime, looked at
//! every second).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::observe::figures::RouteHosts;
use super::observe::socket;
use crate::log::log;

/// What the resolver reads from the installed config.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Installed {
    /// The host names to resolve (IP literals are not).
    pub names: BTreeSet<String>,
    /// The account of each name the route lines name (the lowest, when routes of several
    /// accounts share a host): its share of the queries.
    pub accounts: BTreeMap<String, String>,
    /// Hosts that are neither a name nor an IP literal.
    pub ignored: Vec<String>,
    pub nameservers: Vec<SocketAddr>,
    pub ignored_nameservers: Vec<String>,
    /// The `stats socket` of `global`, when it is a path.
    pub stats_socket: Option<PathBuf>,
    /// The generation in the header.
    pub generation: Option<u64>,
    /// The route lines by host.
    pub routes: RouteHosts,
    /// Where to serve `/ready` and `/agent/metrics` (the agent backend's server, inside the
    /// chroot when there is one).
    pub agent_socket: Option<PathBuf>,
    /// An agent backend's server path that is not only a path (never bound).
    pub unsafe_agent_socket: Option<String>,
    /// The group HAProxy's workers run as (read from /etc/group by [`Watched::poll`]).
    pub worker_group: Option<u32>,
    /// This proxy's own addresses and names (its names are among `names` too: resolved,
    /// never routed).
    pub own: crate::own::Own,
    /// Where its routes may point ([`crate::borders`]).
    pub fences: crate::borders::Fences,
}

/// Reads what the resolver needs from a config's text (and the other proxies' addresses
/// beside it, in `config_dir`).
pub fn read_installed(text: &str, config_dir: &Path) -> Installed {
    let mut installed = Installed::default();
    for host in crate::routes::hosts_needing_address(text) {
        match autoproxy::names::HostName::parse(&host) {
            Ok(name) => {
                installed.names.insert(name.as_str().to_owned());
            }
            Err(_) => installed.ignored.push(host),
        }
    }
    installed.accounts = route_accounts(text);
    let nameservers = autoproxy::artifact::nameservers(text);
    installed.nameservers = nameservers.valid;
    installed.ignored_nameservers = nameservers.ignored;
    // The one parser of the stats socket: a path that is not only a path is never used.
    if let crate::haproxy::DeclaredSocket::Path(socket) = crate::haproxy::declared_socket(text) {
        installed.stats_socket = Some(socket);
    }
    installed.generation = autoproxy::artifact::parse_header(text)
        .ok()
        .map(|header| header.generation);
    installed.routes = RouteHosts::of(text);
    installed.own = crate::own::Own::of(text, config_dir);
    installed.fences = crate::borders::Fences::of(text);
    installed.names.extend(installed.own.names.iter().cloned());
    match socket::bind_path(text) {
        Ok(path) => installed.agent_socket = path,
        Err(path) => installed.unsafe_agent_socket = Some(path),
    }
    installed
}

/// The account of each host name the `#@route`/`#@suffix` lines name (`<key> <host>:<port>
/// <rule> <account> <zone>`), normalised as the names are; the lowest account when routes of
/// several accounts share a host.
fn route_accounts(text: &str) -> BTreeMap<String, String> {
    use autoproxy::artifact::{ROUTE_LINE, SUFFIX_LINE};
    let mut accounts: BTreeMap<String, String> = BTreeMap::new();
    for entry in autoproxy::artifact::body(text).lines().filter_map(|line| {
        line.strip_prefix(ROUTE_LINE)
            .or_else(|| line.strip_prefix(SUFFIX_LINE))
    }) {
        let fields: Vec<&str> = entry.split_whitespace().collect();
        let (Some(target), Some(account)) = (fields.get(1), fields.get(3)) else {
            continue;
        };
        let Some(name) = autoproxy::artifact::target_host(target)
            .filter(|(host, _)| crate::routes::needs_address(host))
            .and_then(|(host, _)| autoproxy::names::HostName::parse(&host).ok())
        else {
            continue;
        };
        let name = name.as_str().to_owned();
        match accounts.get_mut(&name) {
            Some(kept) if kept.as_str() <= *account => {}
            Some(kept) => *kept = (*account).to_owned(),
            None => {
                accounts.insert(name, (*account).to_owned());
            }
        }
    }
    accounts
}

impl Installed {
    /// Adds the hosts the route map files beside the config serve with: a held route keeps
    /// its previous target ([`crate::routes`]), whose host the config may no longer name, and
    /// its address must stay current while it serves.
    pub fn add_serving_hosts(&mut self, config_dir: &Path, text: &str) {
        let generation = autoproxy::artifact::parse_header(text).map_or(0, |h| h.generation);
        let maps = autoproxy::artifact::MapFiles::named_by(text, generation);
        for path in [maps.routes, maps.suffixes] {
            let table = std::fs::read_to_string(config_dir.join(path)).unwrap_or_default();
            for (_, target) in crate::routes::entries(&table) {
                if let Some(host) = crate::routes::host_needing_address(target)
                    && let Ok(name) = autoproxy::names::HostName::parse(&host)
                {
                    self.names.insert(name.as_str().to_owned());
                }
            }
        }
    }
}

/// A file's inode, size and mtime (seconds, nanoseconds).
type FileId = (u64, u64, i64, i64);

fn file_id(path: &Path) -> std::io::Result<FileId> {
    std::fs::metadata(path).map(|m| (m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
}

/// The config file as last read.
#[derive(Debug)]
pub struct Watched {
    path: PathBuf,
    /// Inode, size and mtime (seconds, nanoseconds) of the text last read, and of the other
    /// proxies' addresses beside it (none when there is no such file): a change of either is
    /// a change of what the service reads.
    id: Option<(FileId, Option<FileId>)>,
    next_check: Instant,
}

impl Watched {
    /// The config at `path`, first looked at `now`.
    pub fn new(path: &Path, now: Instant) -> Watched {
        Watched {
            path: path.to_path_buf(),
            id: None,
            next_check: now,
        }
    }

    /// When to look again.
    pub fn next_check(&self) -> Instant {
        self.next_check
    }

    /// What the config holds, when its file changed since the last look; looks at most once
    /// a second.
    pub fn poll(&mut self, now: Instant) -> Option<Installed> {
        if now < self.next_check {
            return None;
        }
        self.changed(now).map(|text| {
            let dir = self.path.parent().unwrap_or(Path::new("/"));
            let mut installed = read_installed(&text, dir);
            installed.add_serving_hosts(dir, &text);
            let groups = std::fs::read_to_string("/etc/group").unwrap_or_default();
            installed.worker_group = socket::worker_group(&text, &groups);
            installed
        })
    }

    /// The config's text when it changed since the last look.
    fn changed(&mut self, now: Instant) -> Option<String> {
        self.next_check = now + Duration::from_secs(1);
        let dir = self.path.parent().unwrap_or(Path::new("/"));
        let peers = file_id(&dir.join(crate::own::peers::FILE)).ok();
        let id = file_id(&self.path)
            .map(|id| (id, peers))
            .map_err(|err| {
                if self.id.is_some() {
                    log(format_args!("cannot read {}: {err}", self.path.display()));
                }
                self.id = None;
            })
            .ok()?;
        if Some(id) == self.id {
            return None;
        }
        match std::fs::read_to_string(&self.path) {
            Ok(text) => {
                self.id = Some(id);
                Some(text)
            }
            Err(err) => {
                log(format_args!("cannot read {}: {err}", self.path.display()));
                self.id = None;
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;

    #[test]
    fn a_held_route_keeps_its_old_host_among_the_names() {
        let dir = tempfile::tempdir().expect("temp dir");
        let text =
            "# generation: 2\nglobal\n#@route proxy.api.x.example api.new.example:443 api 1 Z1\n";
        std::fs::create_dir(dir.path().join("autoproxy")).expect("mkdir");
        std::fs::write(
            dir.path().join("autoproxy/routes.map"),
            "proxy.api.x.example api.old.example:443\nproxy.api.y.example 10.0.0.1:443\n",
        )
        .expect("write");
        let mut installed = read_installed(text, dir.path());
        installed.add_serving_hosts(dir.path(), text);
        assert_eq!(
            installed.names.iter().collect::<Vec<_>>(),
            ["api.new.example", "api.old.example"]
        );
    }

    #[test]
    fn a_change_of_the_other_proxies_is_a_change_of_the_installed_config() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("haproxy.cfg");
        std::fs::write(&path, "# generation: 1\nglobal\n").expect("write");
        let start = Instant::now();
        let mut watched = Watched::new(&path, start);
        let first = watched.poll(start).expect("read at first");
        assert!(first.own.peers.is_empty());
        assert!(watched.poll(start + Duration::from_secs(2)).is_none());
        let peer: IpAddr = "10.0.2.7".parse().expect("an address");
        crate::own::peers::write(dir.path(), &[peer].into()).expect("written");
        let again = watched
            .poll(start + Duration::from_secs(4))
            .expect("read again: the peers changed");
        assert!(again.own.peers.contains(peer));
    }

    #[test]
    fn the_installed_config_gives_names_nameservers_and_the_stats_socket() {
        let text = "# generation: 1\nglobal\n    stats socket unix@/run/haproxy/admin.sock mode 660\n\
                    \x20   stats socket /other.sock\n\
                    defaults\n    stats socket /not-global.sock\n\
                    #@route a.example API.x.example.:443 api 1 Z\n\
                    #@route b.example 10.0.0.1:443 api 1 Z\n\
                    #@suffix c.example bad$name.example:443 ingress-int 1 Z\n\
                    #@nameserver 10.0.0.2:53\n#@nameserver nope\n";
        let installed = read_installed(text, Path::new("/nonexistent"));
        assert_eq!(
            installed.names.iter().collect::<Vec<_>>(),
            ["api.x.example"]
        );
        assert_eq!(installed.ignored, ["bad$name.example"]);
        assert_eq!(
            installed.accounts,
            BTreeMap::from([("api.x.example".to_owned(), "1".to_owned())])
        );
        let shared = "# generation: 1\nglobal\n\
                      #@route a.example api.x.example:443 api 222 Z\n\
                      #@suffix b.example API.x.example.:8443 ingress-int 111 Z\n\
                      #@route c.example api.y.example:443 api 333 Z\n\
                      #@route d.example api.z.example:443\n";
        let accounts = read_installed(shared, Path::new("/nonexistent")).accounts;
        assert_eq!(
            accounts.into_iter().collect::<Vec<_>>(),
            [
                ("api.x.example".to_owned(), "111".to_owned()),
                ("api.y.example".to_owned(), "333".to_owned())
            ],
            "the lowest account of a shared host; none without the field"
        );
        assert_eq!(
            installed.nameservers,
            ["10.0.0.2:53".parse::<SocketAddr>().expect("addr")]
        );
        assert_eq!(installed.ignored_nameservers, ["nope"]);
        assert_eq!(
            installed.stats_socket.as_deref(),
            Some(Path::new("/run/haproxy/admin.sock"))
        );
    }
}
