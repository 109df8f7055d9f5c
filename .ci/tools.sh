#!/usr/bin/env bash
# Installs the pinned tools the tests, the demo and the template checks run against, from the
# package registries only. Idempotent: each Python tool lives in its own venv under the cache
# (outside the clone, safe to reuse: a venv is keyed by its pinned version), and a second run
# only checks. Prints the PATH entry to use on its last line.
#
#   .ci/tools.sh [core|all]     core: haproxy, moto, AWS CLI, cargo-lambda (tests and demo),
#                                     promtool (checks HAProxy's /metrics), and HAProxy 3.0
#                                     built from source (the second test run)
#                               all:  core + SAM CLI, cfn-lint, checkov (template checks),
#                                     cargo-about (the release bundle's notices)
set -euo pipefail

MOTO_VERSION=5.2.5
AWSCLI_VERSION=1.46.3
CARGO_LAMBDA_VERSION=1.9.2
SAM_VERSION=1.170.0
CFN_LINT_VERSION=1.58.0
CHECKOV_VERSION=3.3.30
# The release bundle's third-party notices (make dist), from Cargo.lock: built from crates.io
# (about 2 minutes of 2 cores, once), --locked to its own lock file.
CARGO_ABOUT_VERSION=0.9.3
# HAProxy 3.0 as Debian 13 ships it; the orig tarball's digest, as Debian 13's signed index has it.
HAPROXY30_VERSION=3.0.11
HAPROXY30_SHA256=a133e2d550c5fd9a849b5c7ab17bb945bcdad209ca140d41f45ebf31943ae783

what=${1:-core}
cache=${AUTOPROXY_CACHE:-$HOME/.cache/autoproxy}
bin="$cache/bin"
mkdir -p "$bin"

log() { echo "tools: $*" >&2; }

need_apt=()
command -v haproxy >/dev/null || need_apt+=(haproxy)
command -v openssl >/dev/null || need_apt+=(openssl)
command -v dnsmasq >/dev/null || need_apt+=(dnsmasq-base)
command -v flock >/dev/null || need_apt+=(util-linux)
command -v curl >/dev/null || need_apt+=(curl)
# The durability test watches the apply's fsync(2) and rename(2) calls from the kernel's side.
command -v strace >/dev/null || need_apt+=(strace)
# `kill` as a program (the harness runs it without a shell): procps, absent from slim images.
[ -x /bin/kill ] || [ -x /usr/bin/kill ] || need_apt+=(procps)
# The venvs below, and autoproxy-resolver under test.
python3 -c 'import ensurepip, venv' 2>/dev/null || need_apt+=(python3 python3-venv)
# apt_install PACKAGES...: from the machine's own (Debian 12) sources.
apt_install() {
  if [ "$(id -u)" -ne 0 ] && ! command -v sudo >/dev/null; then
    log "missing $* and not root: install them with apt-get and run again"; exit 1
  fi
  local sudo_="" ; [ "$(id -u)" -ne 0 ] && sudo_=sudo
  log "apt-get install $*"
  $sudo_ apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq --no-install-recommends "$@" >&2
}
[ ${#need_apt[@]} -eq 0 ] || apt_install "${need_apt[@]}"
# apt_update: the package lists, when a look-up found nothing (a fresh machine has none).
apt_update() {
  local sudo_="" ; [ "$(id -u)" -ne 0 ] && sudo_=sudo
  $sudo_ apt-get update -qq >&2 || log "apt-get update failed"
}

# venv NAME "pip specs" EXECUTABLES...: one venv per tool set, rebuilt when the pins change.
venv() {
  local name=$1 specs=$2; shift 2
  local dir="$cache/venv-$name" stamp
  stamp=$(echo "$specs" | sha256sum | cut -c1-16)
  if [ ! -f "$dir/.stamp-$stamp" ]; then
    log "pip install $specs (into $dir)"
    rm -rf "$dir"
    python3 -m venv "$dir"
    "$dir/bin/pip" install -q --disable-pip-version-check $specs >&2
    touch "$dir/.stamp-$stamp"
  fi
  for exe in "$@"; do ln -sf "$dir/bin/$exe" "$bin/$exe"; done
}

# HAProxy 3.0, the other end of the supported range (Debian 13), for the tests' second run and
# the data-plane benchmark: built from Debian 13's source, since Debian 12 packages only 2.6.
# The deb-src line for Debian 13 lives in a private apt configuration: the machine's own sources
# never see it (an upgrade would pull Debian 13's packages in). Only the binary is kept, in
# $cache/haproxy-VERSION/bin, keyed by version and build flags like the venvs, and deliberately
# not linked into $bin: 2.6 stays the `haproxy` on PATH, and `make test-haproxy30` puts this one
# first. Only the orig tarball is fetched (Debian 13's patches are not applied).
haproxy30() {
  local dir="$cache/haproxy-$HAPROXY30_VERSION" stamp work apt_cfg revision tarball
  local flags="TARGET=linux-glibc USE_OPENSSL=1 USE_PCRE2=1 USE_PCRE2_JIT=1 USE_ZLIB=1 USE_PROMEX=1"
  stamp=$(echo "$HAPROXY30_SHA256 $flags" | sha256sum | cut -c1-16)
  if [ -f "$dir/.stamp-$stamp" ] && [ -x "$dir/bin/haproxy" ]; then return 0; fi
  local build_deps=() dep
  for dep in build-essential libssl-dev libpcre2-dev zlib1g-dev; do
    dpkg-query -W -f='${Status}' "$dep" 2>/dev/null | grep -q 'ok installed' || build_deps+=("$dep")
  done
  [ ${#build_deps[@]} -eq 0 ] || apt_install "${build_deps[@]}"
  log "building HAProxy $HAPROXY30_VERSION from Debian 13's source (into $dir)"
  work=$(mktemp -d)
  # shellcheck disable=SC2064 # $work is meant to expand now
  trap "rm -rf '$work'" EXIT
  mkdir -p "$work/apt/lists/partial" "$work/apt/cache/archives/partial" "$work/src"
  echo "deb-src http://deb.debian.org/debian trixie main" >"$work/apt/sources.list"
  apt_cfg=(-o "Dir::Etc::SourceList=$work/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
           -o "Dir::State::Lists=$work/apt/lists" -o "Dir::Cache=$work/apt/cache")
  # Whichever Debian revision of the version is published; apt checks what it downloads
  # against the signed index. apt-get source fails as a whole when the .dsc or the Debian diff
  # is missing (a superseded revision's are), so success is judged by the tarball's digest.
  apt-get "${apt_cfg[@]}" update >"$work/apt.log" 2>&1 || true
  revision=$(apt-cache "${apt_cfg[@]}" showsrc haproxy 2>>"$work/apt.log" |
             sed -n "s/^Version: \(${HAPROXY30_VERSION//./\\.}-.*\)/\1/p" | sort -V | tail -n 1)
  if [ -n "$revision" ]; then
    (cd "$work/src" && apt-get "${apt_cfg[@]}" source --download-only "haproxy=$revision") \
      >>"$work/apt.log" 2>&1 || true
  fi
  tarball="$work/src/haproxy_$HAPROXY30_VERSION.orig.tar.gz"
  if [ ! -f "$tarball" ] || ! echo "$HAPROXY30_SHA256  $tarball" | sha256sum -c --status; then
    cat "$work/apt.log" >&2
    log "FAILED: no source for HAProxy $HAPROXY30_VERSION (haproxy_$HAPROXY30_VERSION.orig.tar.gz" \
        "with sha256 $HAPROXY30_SHA256) from Debian 13's deb-src (revision found: '${revision:-none}');" \
        "the tests' second run needs it"
    exit 1
  fi
  tar -xzf "$tarball" -C "$work/src"
  # shellcheck disable=SC2086 # $flags is a list of make variables
  if ! make -C "$work/src/haproxy-$HAPROXY30_VERSION" -j"$(nproc)" $flags >"$work/make.log" 2>&1; then
    tail -n 40 "$work/make.log" >&2
    log "FAILED: building HAProxy $HAPROXY30_VERSION (make $flags)"
    exit 1
  fi
  rm -rf "$dir"
  mkdir -p "$dir/bin"
  cp "$work/src/haproxy-$HAPROXY30_VERSION/haproxy" "$dir/bin/haproxy"
  rm -rf "$work"; trap - EXIT
  # sed reads the whole answer: head could close the pipe early and, under pipefail, fail the run.
  "$dir/bin/haproxy" -v | sed -n 1p >&2
  touch "$dir/.stamp-$stamp"
}

# promtool, which checks the Prometheus text HAProxy's exporter serves (it::metrics): only that
# binary, out of Debian 12's `prometheus` package (`apt-get download`, then unpacked, never
# installed: the package would bring a Prometheus server, its user and its service), kept in
# $cache/promtool-VERSION, keyed by the package's version, and linked into $bin.
promtool() {
  local version dir work
  version=$(apt-cache policy prometheus 2>/dev/null | sed -n 's/^ *Candidate: //p')
  if [ -z "$version" ] || [ "$version" = "(none)" ]; then
    apt_update
    version=$(apt-cache policy prometheus 2>/dev/null | sed -n 's/^ *Candidate: //p')
  fi
  if [ -z "$version" ] || [ "$version" = "(none)" ]; then
    log "FAILED: no Debian package prometheus to take promtool from"; exit 1
  fi
  dir="$cache/promtool-${version//[^A-Za-z0-9.+-]/_}"
  if [ ! -x "$dir/promtool" ]; then
    log "promtool from Debian's prometheus $version (into $dir)"
    work=$(mktemp -d)
    if ! (cd "$work" && apt-get download -q "prometheus=$version" >"$work/apt.log" 2>&1) ||
       ! dpkg-deb -x "$work"/prometheus_*.deb "$work/unpacked"; then
      cat "$work/apt.log" >&2; rm -rf "$work"
      log "FAILED: apt-get download prometheus=$version"; exit 1
    fi
    mkdir -p "$dir"
    cp "$work/unpacked/usr/bin/promtool" "$dir/promtool.new"
    mv "$dir/promtool.new" "$dir/promtool"
    rm -rf "$work"
  fi
  "$dir/promtool" --version >/dev/null
  ln -sf "$dir/promtool" "$bin/promtool"
}

# cargo_tool CRATE VERSION FEATURES: a cargo subcommand built from crates.io with its own lock
# file, into $cache/CRATE-VERSION (keyed by version like the venvs), linked into $bin.
cargo_tool() {
  local crate=$1 version=$2 features=$3 dir="$cache/$1-$2"
  if [ ! -x "$dir/bin/$crate" ]; then
    log "cargo install $crate $version (into $dir)"
    rm -rf "$dir"
    cargo install -q --locked --features "$features" --version "$version" --root "$dir" "$crate" >&2
  fi
  ln -sf "$dir/bin/$crate" "$bin/$crate"
}

haproxy30
promtool
venv moto "moto[server]==$MOTO_VERSION" moto_server
venv awscli "awscli==$AWSCLI_VERSION" aws
venv cargo-lambda "cargo-lambda==$CARGO_LAMBDA_VERSION" cargo-lambda
if [ "$what" = all ]; then
  venv sam "aws-sam-cli==$SAM_VERSION" sam
  venv cfn-lint "cfn-lint==$CFN_LINT_VERSION" cfn-lint
  venv checkov "checkov==$CHECKOV_VERSION" checkov
  cargo_tool cargo-about "$CARGO_ABOUT_VERSION" cli
fi
echo "$bin"
