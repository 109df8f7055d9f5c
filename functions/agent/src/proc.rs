//! `/proc`, the agent's one reader of it: which processes there are, whether one still
//! exists, each one's state and parent (`/proc/<pid>/stat`), its command line; this process's
//! peak memory, the host name and the kernel's network tables (`/proc/net`). What a process
//! is to the agent (HAProxy reading a config, a child to kill with its tree, a writer whose
//! temporary file may be a leftover) and what a table says are its callers' business.

/// What `/proc/<pid>/stat` says of a process, as far as the agent asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// The state letter: `R`, `S`, `D`, `T`, `Z` (a zombie), `X` (dead), …
    pub state: char,
    /// The parent's pid.
    pub parent: u32,
}

impl Stat {
    /// Neither a zombie nor dead: the process still runs (or sleeps, or is stopped).
    pub fn live(&self) -> bool {
        !matches!(self.state, 'Z' | 'X')
    }
}

/// Every process `/proc` lists now.
pub fn pids() -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// Whether a process `pid` exists now (running, sleeping, stopped, or a zombie not yet
/// reaped).
pub fn exists(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// The state and parent of `pid`; `None` when it is gone (or `/proc` says something else).
pub fn stat(pid: u32) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// The arguments of `pid`'s command line, each as the bytes it was given (none for a kernel
/// thread).
pub fn command_line(pid: u32) -> Option<Vec<Vec<u8>>> {
    let bytes = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let Some(args) = bytes.strip_suffix(&[0]) else {
        return Some(Vec::new());
    };
    Some(args.split(|b| *b == 0).map(<[u8]>::to_vec).collect())
}

/// This process's peak resident memory (`VmHWM` in `/proc/self/status`), as the kernel
/// writes it (`8196 kB`).
pub fn own_peak_memory() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .map(|value| value.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// The host name (`/proc/sys/kernel/hostname`), trimmed.
pub fn hostname() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    Some(name.trim().to_owned())
}

/// The text of the kernel's network table `/proc/net/<table>` (`fib_trie`, `ipv6_route`,
/// `if_inet6`); empty when it cannot be read.
pub fn net(table: &str) -> String {
    std::fs::read_to_string(format!("/proc/net/{table}")).unwrap_or_default()
}

/// `pid (command) state ppid …`: the command may hold spaces and `)`, so the fields are read
/// after its last `)`.
fn parse_stat(text: &str) -> Option<Stat> {
    let mut fields = text[text.rfind(')')? + 1..].split_whitespace();
    let mut state = fields.next()?.chars();
    let (Some(letter), None) = (state.next(), state.next()) else {
        return None;
    };
    Some(Stat {
        state: letter,
        parent: fields.next()?.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check(text: &str, expected: Option<(char, u32)>) {
        let stat = parse_stat(text).map(|stat| (stat.state, stat.parent));
        assert_eq!(stat, expected, "{text:?}");
    }

    #[test]
    fn stat_gives_the_state_and_parent_after_the_command() {
        check("42 (haproxy) S 1 42 42 0 -1", Some(('S', 1)));
        check("43 (a) b) Z 42 0", Some(('Z', 42)));
        check("44 (x (y)) R 7", Some(('R', 7)));
        check("45 (sh) S", None);
        check("46 (sh) S x", None);
        check("47 (sh) SS 1", None);
        check("48 sh S 1", None);
        check("", None);
    }

    #[test]
    fn this_process_is_found_live_with_its_parent_and_command_line() {
        let me = std::process::id();
        assert!(pids().contains(&me));
        assert!(exists(me));
        assert!(!exists(u32::MAX));
        let stat = stat(me).expect("our own stat");
        assert!(stat.live(), "{stat:?}");
        assert_eq!(stat.parent, std::os::unix::process::parent_id());
        let args = command_line(me).expect("our own command line");
        let first = std::env::args_os().next().expect("argv[0]");
        assert_eq!(
            args.first().map(Vec::as_slice),
            Some(first.as_encoded_bytes())
        );
        assert!(
            !Stat {
                state: 'Z',
                parent: 1
            }
            .live()
        );
    }
}
