//! The HAProxy this run drives is the one it means to: with `AUTOPROXY_EXPECT_HAPROXY` set
//! (`make test-haproxy30` sets it), a `haproxy` on PATH of another version fails the run.

use autoproxy_tests::haproxy_version;

#[test]
fn the_haproxy_on_path_is_the_expected_one() {
    let version = haproxy_version::check_expected().unwrap_or_else(|e| panic!("{e}"));
    // Shown with --nocapture; the Makefile prints it before each run as well.
    eprintln!("haproxy on PATH: {}", version.line);
}
