//! Addresses of the routes' hosts: the file `<config dir>/autoproxy/addresses.map` that a
//! starting HAProxy worker loads (`name address` lines), and [`ensure`], which the apply
//! calls before it swaps in a generation so that every route it installs has its address
//! when the apply returns.
//!
//! One DNS client per instance keeps the query budget, so [`ensure`] first asks the running
//! resolver over its control socket `<config dir>/autoproxy/resolver.sock` (a Unix stream):
//!
//! ```text
//! client:  want <name>          one line per name (at most MAX_WANTED)
//!          go <milliseconds>    how long the client waits for the answers
//! server:  ok <name> <address>  one line per name, in the order asked, once the map file
//!          missing <name> <why>   holds the addresses (resolved first, at the cap)
//!          done
//!          error <why>          instead, for a request it cannot read
//! ```
//!
//! The resolver keeps such wanted names (and refreshes them) for [`WANTED_KEEP`] even though
//! the installed config does not name them yet. When no resolver answers, [`ensure`]
//! resolves the names itself with the resolver's own DNS code and pacing, and merges them into
//! the file under the lock the resolver also takes when it writes (`addresses.map.lock`).
//! Every write is atomic (a temporary file, fsync, rename, fsync of the directory): a
//! starting worker sees the old file or the new one, whole.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// The map's path relative to the config's directory, and its name in HAProxy.
pub const MAP: &str = "autoproxy/addresses.map";
/// The resolver's control socket, relative to the config's directory.
pub const SOCKET: &str = "autoproxy/resolver.sock";
/// How long the resolver keeps a name it was asked for that its config does not name.
pub const WANTED_KEEP: Duration = Duration::from_secs(600);
/// The most names one request may want.
pub const MAX_WANTED: usize = 100_000;

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

/// The address map file of one config directory.
#[derive(Debug, Clone)]
pub struct MapFile {
    path: PathBuf,
    lock: PathBuf,
}

/// The identity of a file's contents as written: changes whenever anyone rewrites it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    ino: u64,
    size: u64,
    mtime_ns: i128,
}

/// The entries of a map file, and its lines that are not entries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Entries {
    pub addresses: BTreeMap<String, IpAddr>,
    /// `(line number, text)` of every malformed line.
    pub malformed: Vec<(usize, String)>,
}

/// The lock on a map file, held while it is read and rewritten.
#[derive(Debug)]
pub struct Locked(File);

impl Drop for Locked {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

/// Parses `name address` lines; blank lines and `#` comments are skipped.
pub fn parse(text: &str) -> Entries {
    let mut entries = Entries::default();
    for (number, line) in text.lines().enumerate() {
        let mut words = line.split_whitespace();
        match (words.next(), words.next(), words.next()) {
            (None, ..) => {}
            (Some(word), ..) if word.starts_with('#') => {}
            (Some(name), Some(address), None) => match address.parse() {
                Ok(address) => {
                    entries.addresses.insert(name.to_ascii_lowercase(), address);
                }
                Err(_) => entries.malformed.push((number + 1, line.to_owned())),
            },
            _ => entries.malformed.push((number + 1, line.to_owned())),
        }
    }
    entries
}

/// The text of a map file: one `name address` line per entry, in the order given.
pub fn format<'a>(entries: impl IntoIterator<Item = (&'a str, IpAddr)>) -> String {
    let mut text = String::new();
    for (name, address) in entries {
        use std::fmt::Write as _;
        let _ = writeln!(text, "{name} {address}");
    }
    text
}

impl MapFile {
    /// The map file beside the config in `config_dir`.
    pub fn in_dir(config_dir: &Path) -> MapFile {
        let path = config_dir.join(MAP);
        let lock = path.with_extension("map.lock");
        MapFile { path, lock }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Takes the lock (waits for it); creates the directory and the lock file if needed.
    pub fn lock(&self) -> std::io::Result<Locked> {
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&self.lock)?;
        file.lock()?;
        Ok(Locked(file))
    }

    /// The stamp of the file now; `None` when it does not exist.
    pub fn stamp(&self) -> Option<Stamp> {
        let meta = std::fs::metadata(&self.path).ok()?;
        Some(Stamp {
            ino: meta.ino(),
            size: meta.size(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        })
    }

    /// Its entries; empty when it does not exist.
    pub fn read(&self) -> std::io::Result<Entries> {
        match std::fs::read_to_string(&self.path) {
            Ok(text) => Ok(parse(&text)),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(Entries::default()),
            Err(err) => Err(err),
        }
    }

    /// Replaces the file with `text`, atomically and durably, mode 0644; the stamp written.
    /// The caller holds the lock.
    pub fn write(&self, _lock: &Locked, text: &str) -> std::io::Result<Option<Stamp>> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let temp = dir.join(format!(".addresses.map.{}", std::process::id()));
        let written = (|| {
            let mut file = File::create(&temp)?;
            file.write_all(text.as_bytes())?;
            file.set_permissions(std::fs::Permissions::from_mode(0o644))?;
            file.sync_all()?;
            std::fs::rename(&temp, &self.path)
        })();
        if let Err(err) = written {
            let _ = std::fs::remove_file(&temp);
            return Err(err);
        }
        File::open(dir)?.sync_all()?;
        Ok(self.stamp())
    }
}

/// Makes sure each of `names` has an address in `<config dir>/autoproxy/addresses.map`
/// before returning, within `budget` (see the module doc for how).
pub async fn ensure(
    config_dir: &Path,
    names: &[String],
    nameservers: &[SocketAddr],
    budget: Duration,
) -> Ensured {
    let deadline = Instant::now() + budget;
    let mut ensured = Ensured::default();
    let mut wanted = Vec::new();
    for name in names {
        match autoproxy::names::HostName::parse(name) {
            Ok(host) => wanted.push(host.as_str().to_owned()),
            Err(err) => ensured.missing.push((name.clone(), err.to_string())),
        }
    }
    wanted.sort();
    wanted.dedup();
    if wanted.is_empty() {
        return ensured;
    }
    let socket = config_dir.join(SOCKET);
    match ask_resolver(&socket, &wanted, deadline).await {
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
            ensured.by = By::Itself;
            let results = crate::resolve::resolve_once(&wanted, nameservers, deadline).await;
            let map = MapFile::in_dir(config_dir);
            let found: Vec<(String, IpAddr)> = results
                .iter()
                .filter_map(|(name, result)| result.as_ref().ok().map(|a| (name.clone(), *a)))
                .collect();
            match merge(&map, &found) {
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
        Err(Asked::Failed(why)) => {
            ensured.by = By::Resolver;
            ensured
                .missing
                .extend(wanted.into_iter().map(|name| (name, why.clone())));
        }
    }
    ensured
}

/// Adds `found` to the map file under its lock, keeping every other entry.
fn merge(map: &MapFile, found: &[(String, IpAddr)]) -> std::io::Result<()> {
    if found.is_empty() {
        return Ok(());
    }
    let lock = map.lock()?;
    let mut entries = map.read()?.addresses;
    for (name, address) in found {
        entries.insert(name.clone(), *address);
    }
    map.write(
        &lock,
        &format(entries.iter().map(|(n, a)| (n.as_str(), *a))),
    )?;
    Ok(())
}

/// Why the resolver gave no answers.
#[derive(Debug)]
enum Asked {
    /// Nothing listens on its socket: resolve here.
    NoResolver,
    /// It listens but the exchange failed: the names stay missing (a second DNS client
    /// would break the instance's budget).
    Failed(String),
}

/// One name's answer: its address, or why it has none.
type Answer = Result<IpAddr, String>;

async fn ask_resolver(
    socket: &Path,
    names: &[String],
    deadline: Instant,
) -> Result<Vec<(String, Answer)>, Asked> {
    let connect = tokio::time::timeout(
        Duration::from_secs(2),
        tokio::net::UnixStream::connect(socket),
    )
    .await;
    let Ok(Ok(stream)) = connect else {
        return Err(Asked::NoResolver);
    };
    let failed = |what: &str| Asked::Failed(format!("resolver at {}: {what}", socket.display()));
    let (read, mut write) = stream.into_split();
    let left = deadline.saturating_duration_since(Instant::now());
    // The resolver answers a little before we stop waiting, with what it has by then.
    let server_wait = left.saturating_sub(Duration::from_millis(500).min(left / 4));
    let mut request = String::with_capacity(names.len() * 40 + 16);
    for name in names {
        request.push_str("want ");
        request.push_str(name);
        request.push('\n');
    }
    request.push_str(&format!("go {}\n", server_wait.as_millis()));
    let exchange = async {
        write
            .write_all(request.as_bytes())
            .await
            .map_err(|err| failed(&err.to_string()))?;
        let mut lines = BufReader::new(read).lines();
        let mut answers: BTreeMap<String, Answer> = BTreeMap::new();
        loop {
            let line = lines
                .next_line()
                .await
                .map_err(|err| failed(&err.to_string()))?
                .ok_or_else(|| failed("closed before 'done'"))?;
            let mut words = line.splitn(3, ' ');
            match (words.next(), words.next(), words.next()) {
                (Some("done"), None, None) => break,
                (Some("ok"), Some(name), Some(address)) => {
                    let answer = address
                        .parse()
                        .map_err(|_| format!("the resolver sent {address:?}"));
                    answers.insert(name.to_owned(), answer);
                }
                (Some("missing"), Some(name), why) => {
                    answers.insert(name.to_owned(), Err(why.unwrap_or("no reason").to_owned()));
                }
                (Some("error"), ..) => return Err(failed(&line)),
                _ => return Err(failed(&format!("unexpected line {line:?}"))),
            }
        }
        Ok(answers)
    };
    let mut answers = tokio::time::timeout_at(deadline.into(), exchange)
        .await
        .map_err(|_| failed("no answer within the budget"))??;
    Ok(names
        .iter()
        .map(|name| {
            let answer = answers
                .remove(name)
                .unwrap_or_else(|| Err("the resolver did not answer for it".to_owned()));
            (name.clone(), answer)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_files_read_back_what_was_written() {
        let text = "a.example 10.0.0.1\nb.example fd00::1\n";
        let entries = parse(text);
        assert!(entries.malformed.is_empty());
        assert_eq!(
            format(entries.addresses.iter().map(|(n, a)| (n.as_str(), *a))),
            text
        );
        let entries = parse("# comment\n\nA.example 10.0.0.1\nb.example\nc.example x\nd 1 2\n");
        assert_eq!(entries.addresses.len(), 1);
        assert!(entries.addresses.contains_key("a.example"));
        assert_eq!(
            entries.malformed.iter().map(|m| m.0).collect::<Vec<_>>(),
            [4, 5, 6]
        );
    }

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
            &[closed],
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

    #[test]
    fn writes_are_atomic_and_merges_keep_other_entries() {
        let dir = tempfile::tempdir().expect("temp dir");
        let map = MapFile::in_dir(dir.path());
        assert_eq!(map.read().expect("reads").addresses.len(), 0);
        assert_eq!(map.stamp(), None);
        let a: IpAddr = "10.0.0.1".parse().expect("ip");
        merge(&map, &[("a.example".to_owned(), a)]).expect("merges");
        let first = map.stamp().expect("exists");
        let b: IpAddr = "10.0.0.2".parse().expect("ip");
        merge(&map, &[("b.example".to_owned(), b)]).expect("merges");
        assert_ne!(map.stamp(), Some(first));
        let text = std::fs::read_to_string(map.path()).expect("reads");
        assert_eq!(text, "a.example 10.0.0.1\nb.example 10.0.0.2\n");
        let mode = std::fs::metadata(map.path())
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o644);
        let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("autoproxy"))
            .expect("lists")
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with(".addresses"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }
}
