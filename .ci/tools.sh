#!/usr/bin/env bash
# Installs the pinned tools the tests, the demo and the template checks run against, from the
# package registries only. Idempotent: each Python tool lives in its own venv under the cache
# (outside the clone, safe to reuse: a venv is keyed by its pinned version), and a second run
# only checks. Prints the PATH entry to use on its last line.
#
#   .ci/tools.sh [core|all]     core: haproxy, moto, AWS CLI, cargo-lambda (tests and demo)
#                               all:  core + SAM CLI, cfn-lint, checkov (template checks)
set -euo pipefail

MOTO_VERSION=5.2.5
AWSCLI_VERSION=1.46.3
CARGO_LAMBDA_VERSION=1.9.2
SAM_VERSION=1.170.0
CFN_LINT_VERSION=1.58.0
CHECKOV_VERSION=3.3.30

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
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ] && ! command -v sudo >/dev/null; then
    log "missing ${need_apt[*]} and not root: install them with apt-get and run again"; exit 1
  fi
  sudo_="" ; [ "$(id -u)" -ne 0 ] && sudo_=sudo
  log "apt-get install ${need_apt[*]}"
  $sudo_ apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >&2
fi

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

venv moto "moto[server]==$MOTO_VERSION" moto_server
venv awscli "awscli==$AWSCLI_VERSION" aws
venv cargo-lambda "cargo-lambda==$CARGO_LAMBDA_VERSION" cargo-lambda
if [ "$what" = all ]; then
  venv sam "aws-sam-cli==$SAM_VERSION" sam
  venv cfn-lint "cfn-lint==$CFN_LINT_VERSION" cfn-lint
  venv checkov "checkov==$CHECKOV_VERSION" checkov
fi
echo "$bin"
