//! A long session (a `kubectl exec`, a watch) through the proxy: it outlives a route change
//! (no reload) and a settings change (a reload: the old worker keeps it), and ends only when
//! it has been idle both ways for the config's client and server timeouts, which stand in for
//! a tunnel timeout the template does not set. The timeouts are shortened here (the default
//! template with `4h` turned into [`IDLE`]); `hard-stop-after` is longer than the whole test,
//! so that what ends the session can only be the idle timeout.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::time::Instant;

use autoproxy::names::HostName;
use autoproxy_tests::proxy::Backend;
use autoproxy_tests::stream::{Held, streamer};

use super::*;

/// The shortened idle timeout, in place of the template's 4 h.
const IDLE: Duration = Duration::from_secs(2);
const ECHO: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 62);
const STREAMER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 63);

/// The default template with its client and server timeouts at [`IDLE`].
fn short_timeouts() -> String {
    let template = autoproxy::render::DEFAULT_TEMPLATE;
    let idle = format!("{}s", IDLE.as_secs());
    let mut shortened = template.to_owned();
    for side in ["client", "server"] {
        let line = format!("    timeout {side} 4h\n");
        assert_eq!(
            template.matches(&line).count(),
            1,
            "the template's {line:?}"
        );
        shortened = shortened.replace(&line, &format!("    timeout {side} {idle}\n"));
    }
    assert!(!template.contains("timeout tunnel"), "a tunnel timeout now");
    shortened
}

/// A backend that sends back whatever it reads, until the peer closes.
fn echo(port: u16) -> Backend {
    let listener = TcpListener::bind((ECHO, port)).unwrap();
    Backend::serving("echo", listener, |mut stream, _| {
        let mut buffer = [0u8; 4096];
        while let Ok(n) = stream.read(&mut buffer) {
            if n == 0 || stream.write_all(&buffer[..n]).is_err() {
                break;
            }
        }
    })
}

/// A config of `generation`: `proxy.api.echo.test` to [`ECHO`], `proxy.api.watch.test` to
/// [`STREAMER`], and `proxy.api.gN.test` to backend a for every N in `zones`; `maxconn` as
/// given (another one reloads).
fn config(f: &Fixture, generation: u64, zones: &[u64], maxconn: u32) -> String {
    let mut routes = Vec::new();
    for (zone, ip) in [("echo.test", ECHO), ("watch.test", STREAMER)] {
        let mut route = proxy::api_route(zone, f.backends.get("a"));
        route.back = HostName::parse(&ip.to_string()).unwrap();
        routes.push(route);
    }
    for zone in zones {
        routes.push(proxy::api_route(
            &format!("g{zone}.test"),
            f.backends.get("a"),
        ));
    }
    let mut options = f.haproxy.options(f.backends.port);
    options.hard_stop_after = "2m".to_owned();
    options.maxconn = maxconn;
    proxy::render_template(
        &short_timeouts(),
        generation,
        &routes,
        &options,
        &[SocketAddr::from((Ipv4Addr::LOCALHOST, 53))],
    )
}

/// A client of the echo backend through the proxy, as an interactive session: it speaks and
/// reads its words back.
struct Session {
    reader: BufReader<TcpStream>,
    said: usize,
}

impl Session {
    fn open(proxy: SocketAddr) -> Session {
        let mut stream = TcpStream::connect(proxy).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(3)))
            .unwrap();
        let hello = proxy::client_hello("proxy.api.echo.test");
        stream.write_all(&hello).unwrap();
        let mut echoed = vec![0u8; hello.len()];
        stream.read_exact(&mut echoed).unwrap();
        assert_eq!(echoed, hello, "the echo backend sent back the ClientHello");
        Session {
            reader: BufReader::new(stream),
            said: 0,
        }
    }

    /// One line there and back: `Err` with how the session ended.
    fn speak(&mut self) -> Result<(), String> {
        self.said += 1;
        let words = format!("line {}\n", self.said);
        let mut line = String::new();
        self.reader
            .get_mut()
            .write_all(words.as_bytes())
            .and_then(|()| self.reader.read_line(&mut line))
            .map_err(|err| format!("line {}: {err}", self.said))?;
        if line == words {
            Ok(())
        } else {
            Err(format!("line {}: read {line:?}", self.said))
        }
    }

    /// Left idle: how long until the proxy ends the session (10 s at most).
    fn idle_until_closed(&mut self) -> Result<Duration, String> {
        let started = Instant::now();
        let stream = self.reader.get_mut();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut byte = [0u8; 1];
        match stream.read(&mut byte) {
            Ok(0) => Ok(started.elapsed()),
            Err(err) if err.kind() == std::io::ErrorKind::ConnectionReset => Ok(started.elapsed()),
            Ok(_) => Err("read data while idle".to_owned()),
            Err(err) => Err(format!("still open after {:?}: {err}", started.elapsed())),
        }
    }
}

#[test]
fn a_session_outlives_a_route_change_and_a_reload_and_ends_when_idle() {
    let f = Fixture::new(&["a"]);
    let _echo = echo(f.backends.port);
    let _streamer = streamer(STREAMER, f.backends.port).unwrap();
    let maxconn = f.haproxy.options(f.backends.port).maxconn;
    f.install_first(&config(&f, 1, &[1], maxconn));
    let mut session = Session::open(f.haproxy.https);
    // A watch: only the server speaks, every 100 ms.
    let mut watch = Held::open(f.haproxy.https, "proxy.api.watch.test").unwrap();
    let worker = f.haproxy.worker_pid();

    let run = f.apply(&f.upload(&config(&f, 2, &[1, 2], maxconn)));
    assert!(run.success(), "{run}");
    assert!(
        run.step("reload").is_empty(),
        "a route change reloaded:\n{run}"
    );
    assert_eq!(f.haproxy.worker_pid(), worker);
    f.assert_routes("g2.test", "a");
    // Speaking every 0.5 s for twice the idle timeout: only idleness ends a session.
    let active_until = Instant::now() + 2 * IDLE;
    while Instant::now() < active_until {
        session
            .speak()
            .unwrap_or_else(|end| panic!("after the route change: {end}"));
        watch
            .alive()
            .unwrap_or_else(|end| panic!("the watch: {end}"));
        std::thread::sleep(Duration::from_millis(500));
    }

    let run = f.apply(&f.upload(&config(&f, 3, &[2], maxconn - 1)));
    assert!(run.success(), "{run}");
    assert_eq!(run.step("reload").len(), 1, "a setting changed:\n{run}");
    assert_ne!(f.haproxy.worker_pid(), worker);
    session
        .speak()
        .unwrap_or_else(|end| panic!("after the reload: {end}"));
    watch
        .alive()
        .unwrap_or_else(|end| panic!("the watch after the reload: {end}"));

    let lasted = session.idle_until_closed().unwrap();
    assert!(
        lasted >= IDLE - Duration::from_millis(100) && lasted < IDLE + Duration::from_secs(2),
        "the idle session ended after {lasted:?}, its timeout is {IDLE:?}"
    );
    // The watch, still streaming in the old worker, is not idle: it flows on.
    watch
        .alive()
        .unwrap_or_else(|end| panic!("the watch after the idle end: {end}"));
}
