//! A network namespace joined to this host by a veth pair: addresses that are not this host's,
//! for a backend a proxy with a wildcard bind may route to (every local address, all of
//! 127.0.0.0/8 included, is the proxy's own there). Needs root. The host end is
//! `10.213.<n>.1/29`, the namespace holds `.2` and `.3` (and [`Namespace::add_address`]'s);
//! names and `<n>` come from the test process's id, the tag and the namespaces the process
//! made before, so concurrent tests do not meet. Everything goes on drop.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::os::fd::AsFd;
use std::process::Command;

/// One namespace and its veth pair.
#[derive(Debug)]
pub struct Namespace {
    name: String,
    host_link: String,
    /// The namespace's end of the pair.
    inner_link: String,
    third: u8,
}

/// `ip` refused a step.
#[derive(Debug, thiserror::Error)]
#[error("`ip {args}` failed ({status}): {stderr}")]
pub struct IpFailed {
    args: String,
    status: String,
    stderr: String,
}

fn ip(args: &[&str]) -> Result<(), IpFailed> {
    let failed = |status: String, stderr: String| IpFailed {
        args: args.join(" "),
        status,
        stderr,
    };
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|err| failed("not started".to_owned(), err.to_string()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(failed(
            out.status.to_string(),
            String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        ))
    }
}

impl Namespace {
    /// Creates namespace `ap<tag><pid>` with the two addresses, both links up. `tag`: two
    /// characters, unique among the tests of one process.
    pub fn create(tag: &str) -> Result<Namespace, IpFailed> {
        static MADE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let pid = std::process::id();
        let made = MADE.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let third = u8::try_from(20 + (pid % 100 * 2 + made) % 200).unwrap_or(20);
        let ns = Namespace {
            name: format!("ap{tag}{pid}"),
            host_link: format!("v{tag}{pid}h"),
            inner_link: format!("v{tag}{pid}n"),
            third,
        };
        let inner = ns.inner_link.clone();
        let net = |last: u8| format!("10.213.{third}.{last}/29");
        ip(&["netns", "add", &ns.name])?;
        ip(&[
            "link",
            "add",
            &ns.host_link,
            "type",
            "veth",
            "peer",
            "name",
            &inner,
        ])?;
        ip(&["link", "set", &inner, "netns", &ns.name])?;
        ip(&["addr", "add", &net(1), "dev", &ns.host_link])?;
        ip(&["link", "set", &ns.host_link, "up"])?;
        let inside = |args: &[&str]| {
            let mut all = vec!["netns", "exec", &ns.name, "ip"];
            all.extend_from_slice(args);
            ip(&all)
        };
        inside(&["addr", "add", &net(2), "dev", &inner])?;
        inside(&["addr", "add", &net(3), "dev", &inner])?;
        inside(&["link", "set", &inner, "up"])?;
        inside(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// The namespace's address ending in `last` (2 or 3).
    pub fn address(&self, last: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, 213, self.third, last)
    }

    /// An address of the namespace outside its `/29` (a link-local one, `169.254.213.<n>`,
    /// stands for the metadata service's range), reached from this host through the pair: a
    /// host route on this end, removed with the pair.
    pub fn add_address(&self, address: Ipv4Addr) -> Result<(), IpFailed> {
        let host = format!("{address}/32");
        ip(&[
            "netns",
            "exec",
            &self.name,
            "ip",
            "addr",
            "add",
            &host,
            "dev",
            &self.inner_link,
        ])?;
        ip(&["route", "add", &host, "dev", &self.host_link])
    }

    /// A link-local address no other namespace of the machine's tests takes:
    /// `169.254.213.<n>`, for [`Namespace::add_address`].
    pub fn link_local(&self) -> Ipv4Addr {
        Ipv4Addr::new(169, 254, 213, self.third)
    }

    /// A listener bound inside the namespace (it stays there whatever thread accepts).
    pub fn listen(&self, addr: SocketAddr) -> std::io::Result<TcpListener> {
        let path = format!("/var/run/netns/{}", self.name);
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let ns = std::fs::File::open(&path)?;
                    nix::sched::setns(ns.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
                        .map_err(std::io::Error::from)?;
                    TcpListener::bind(addr)
                })
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("the binding thread panicked")))
        })
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        // Deleting the namespace deletes its end of the pair, and with it the host's.
        let _ = ip(&["netns", "del", &self.name]);
        let _ = ip(&["link", "del", &self.host_link]);
    }
}
