//! The VPC resolver stand-in (dnsmasq on a loopback port) and a small DNS client.

use super::*;

/// dnsmasq on a loopback port: the VPC resolver. Its hosts file is rewritten and re-read
/// (SIGHUP) whenever Route53 changes.
#[derive(Debug)]
pub struct Resolver {
    process: Spawned,
    pub addr: SocketAddr,
    hosts: PathBuf,
    serial: u16,
}

/// A name whose answer changes with every reload, so a reload can be waited for.
pub(super) const SERIAL_NAME: &str = "serial.resolver.invalid";

impl Resolver {
    pub fn start(
        dir: &Path,
        hosts: &BTreeMap<String, Ipv4Addr>,
    ) -> Result<Resolver, PipelineError> {
        let path = dir.join("hosts");
        let mut last = None;
        for _attempt in 0..10 {
            let port = free_udp_and_tcp_port()?;
            let resolver = Resolver {
                addr: SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
                hosts: path.clone(),
                serial: 0,
                process: {
                    write_hosts(&path, hosts, 0)?;
                    let user = whoami();
                    let mut command = Command::new("dnsmasq");
                    command.args([
                        "--no-daemon",
                        "--conf-file=/dev/null",
                        &format!("--port={port}"),
                        "--listen-address=127.0.0.1",
                        "--bind-interfaces",
                        "--no-resolv",
                        "--no-hosts",
                        "--pid-file=",
                        &format!("--user={user}"),
                        &format!("--addn-hosts={}", path.display()),
                    ]);
                    Spawned::start(command, "dnsmasq", &dir.join("dnsmasq.log"))?
                },
            };
            if resolver.wait_serial(Duration::from_secs(3)) {
                return Ok(resolver);
            }
            last = Some(std::fs::read_to_string(dir.join("dnsmasq.log")).unwrap_or_default());
        }
        Err(step_error(
            "start dnsmasq",
            format!("it never answered: {}", last.unwrap_or_default()),
        ))
    }

    /// Replaces the names it serves and waits until it answers with them.
    pub fn reload(&mut self, hosts: &BTreeMap<String, Ipv4Addr>) -> Result<(), PipelineError> {
        self.serial = self.serial.wrapping_add(1);
        write_hosts(&self.hosts, hosts, self.serial)?;
        let _ = Command::new("kill")
            .args(["-HUP", &self.process.child.id().to_string()])
            .status();
        if self.wait_serial(Duration::from_secs(3)) {
            Ok(())
        } else {
            Err(step_error(
                "reload dnsmasq",
                "the new hosts file was not read within 3 s",
            ))
        }
    }

    pub(super) fn wait_serial(&self, timeout: Duration) -> bool {
        let want = serial_ip(self.serial);
        let deadline = Instant::now() + timeout;
        loop {
            if lookup(self.addr, SERIAL_NAME) == Some(want) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn lookup(&self, name: &str) -> Option<Ipv4Addr> {
        lookup(self.addr, name)
    }

    /// The file it serves (for a person to read).
    pub fn hosts_path(&self) -> &Path {
        &self.hosts
    }
}

pub(super) fn serial_ip(serial: u16) -> Ipv4Addr {
    let [hi, lo] = serial.to_be_bytes();
    Ipv4Addr::new(127, 254, hi, lo)
}

pub(super) fn write_hosts(
    path: &Path,
    hosts: &BTreeMap<String, Ipv4Addr>,
    serial: u16,
) -> Result<(), PipelineError> {
    let mut text = format!(
        "# the VPC resolver's view, generated from moto's Route53 (both accounts)\n{} {SERIAL_NAME}\n",
        serial_ip(serial)
    );
    for (name, ip) in hosts {
        text.push_str(&format!("{ip} {name}\n"));
    }
    let temp = path.with_extension("new");
    std::fs::write(&temp, text).map_err(|e| step_error("write the hosts file", e))?;
    std::fs::rename(&temp, path).map_err(|e| step_error("write the hosts file", e))
}

pub(super) fn whoami() -> String {
    Command::new("id")
        .arg("-un")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "nobody".to_owned())
}

pub(super) fn free_udp_and_tcp_port() -> Result<u16, PipelineError> {
    for _ in 0..50 {
        let udp = UdpSocket::bind("127.0.0.1:0").map_err(|e| step_error("find a port", e))?;
        let port = udp
            .local_addr()
            .map_err(|e| step_error("find a port", e))?
            .port();
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Err(step_error(
        "find a port",
        "no loopback port free for both UDP and TCP",
    ))
}

/// One A query over UDP; the first address of the answer.
pub fn lookup(server: SocketAddr, name: &str) -> Option<Ipv4Addr> {
    let socket = UdpSocket::bind("127.0.0.1:0").ok()?;
    socket
        .set_read_timeout(Some(Duration::from_millis(500)))
        .ok()?;
    let id: u16 = 0x4150;
    let mut query = Vec::with_capacity(64);
    query.extend_from_slice(&id.to_be_bytes());
    query.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.trim_end_matches('.').split('.') {
        query.push(u8::try_from(label.len()).ok()?);
        query.extend_from_slice(label.as_bytes());
    }
    query.extend_from_slice(&[0, 0, 1, 0, 1]);
    socket.send_to(&query, server).ok()?;
    let mut answer = [0u8; 1500];
    let len = socket.recv(&mut answer).ok()?;
    let answer = &answer[..len];
    if len < 12 || answer[..2] != id.to_be_bytes() || answer[3] & 0x0f != 0 {
        return None;
    }
    let count = u16::from_be_bytes([answer[6], answer[7]]);
    // Skip the question (our own, uncompressed) then walk the answers.
    let mut at = 12 + query.len() - 12;
    for _ in 0..count {
        at = skip_name(answer, at)?;
        let fixed = answer.get(at..at + 10)?;
        let rtype = u16::from_be_bytes([fixed[0], fixed[1]]);
        let rdlen = usize::from(u16::from_be_bytes([fixed[8], fixed[9]]));
        at += 10;
        let data = answer.get(at..at + rdlen)?;
        if rtype == 1 && rdlen == 4 {
            return Some(Ipv4Addr::new(data[0], data[1], data[2], data[3]));
        }
        at += rdlen;
    }
    None
}

pub(super) fn skip_name(packet: &[u8], mut at: usize) -> Option<usize> {
    loop {
        let len = *packet.get(at)?;
        match len {
            0 => return Some(at + 1),
            l if l & 0xc0 == 0xc0 => return Some(at + 2),
            l => at += 1 + usize::from(l),
        }
    }
}

/// The names the VPC resolver answers: every A and CNAME of every zone in moto's Route53 for
/// these accounts, CNAMEs followed to an address (through the other records, or the names AWS
/// answers for itself: the ELBs and the peering proxy). A wildcard `*.x` is served as the
/// sample app name `demo.x` (a hosts file has no wildcards).
pub async fn vpc_names(accounts: &[&Account]) -> Result<BTreeMap<String, Ipv4Addr>, PipelineError> {
    enum Target {
        Ip(Ipv4Addr),
        Name(String),
    }
    let clean = |name: &str| {
        let name = name
            .trim_end_matches('.')
            .to_ascii_lowercase()
            .replace("\\052", "*");
        match name.strip_prefix("*.") {
            Some(rest) => format!("demo.{rest}"),
            None => name,
        }
    };
    let mut records: BTreeMap<String, Target> = BTreeMap::new();
    records.insert(PROXY_HOSTNAME.to_owned(), Target::Ip(PROXY_IP));
    for cluster in ALL {
        records.insert(cluster.elb(), Target::Ip(cluster.ingress_ip()));
        records.insert(cluster.api_lb(), Target::Ip(cluster.api_ip()));
    }
    for account in accounts {
        let zones = account
            .route53()
            .list_hosted_zones()
            .into_paginator()
            .items()
            .send()
            .collect::<Result<Vec<_>, _>>()
            .await
            .map_err(|e| step_error("ListHostedZones", autoproxy::aws_error::reason(&e)))?;
        for zone in zones {
            let id = autoproxy::route53::bare_zone_id(zone.id()).to_owned();
            for set in account.record_sets(&id).await? {
                let name = clean(set.name());
                let first = set.resource_records().first().map(|r| r.value().to_owned());
                let target = match (set.r#type(), first) {
                    (RrType::A, Some(ip)) => ip.parse().ok().map(Target::Ip),
                    (RrType::A, None) => set
                        .alias_target()
                        .map(|alias| Target::Name(clean(alias.dns_name()))),
                    (RrType::Cname, Some(target)) => Some(Target::Name(clean(&target))),
                    _ => None,
                };
                if let Some(target) = target {
                    records.insert(name, target);
                }
            }
        }
    }
    let mut names = BTreeMap::new();
    for name in records.keys() {
        let mut here = name;
        for _hop in 0..8 {
            match records.get(here) {
                Some(Target::Ip(ip)) => {
                    names.insert(name.clone(), *ip);
                    break;
                }
                Some(Target::Name(next)) => here = next,
                None => break,
            }
        }
    }
    Ok(names)
}
