#!/usr/bin/env bash
# Checks the SAM template and the two templates beside it (docs/member-account.yaml,
# docs/central-forwarding.yaml) offline: cfn-lint, sam validate --lint, checkov, and a sam build
# that must produce the four functions' bootstrap binaries and the AgentLayer's autoproxy-agent.
# Needs the tools from `.ci/tools.sh all`. Fails on the first step that fails; each step names itself.
#
#   .ci/check-templates.sh            all four steps
#   SKIP_BUILD=1 .ci/check-templates.sh   the three static checks only (seconds, not minutes)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export PATH="${AUTOPROXY_CACHE:-$HOME/.cache/autoproxy}/bin:$PATH"
export SAM_CLI_TELEMETRY=0
templates=(template.yaml docs/member-account.yaml docs/central-forwarding.yaml)

step() { printf '\n== %s\n' "$*"; }
fail() { echo "check-templates: FAILED: $*" >&2; exit 1; }
for tool in cfn-lint sam checkov cargo-lambda; do
  command -v "$tool" >/dev/null || fail "$tool not found: run .ci/tools.sh all"
done
# cargo-lambda links through Zig (the one lookup, shared with `make bench`).
# shellcheck source=.ci/zig.sh
. "$(dirname "$0")/zig.sh" || fail "no zig for cargo-lambda"

# sam build (the Makefile's sam-build) starts at once and runs beside the static checks: they
# are single-threaded Python, and the build has long stretches on one core (the largest crates'
# front ends), so together they take little longer than the build alone. Its output is shown
# at its step; a failing check stops it.
build_log=$(mktemp)
build_pid=
fleet=
cleanup() {
  [ -z "$build_pid" ] || kill -- "-$build_pid" 2>/dev/null || true
  rm -f "$build_log" "$fleet"
}
trap cleanup EXIT
if [ -z "${SKIP_BUILD:-}" ]; then
  setsid -w make --no-print-directory sam-build >"$build_log" 2>&1 &
  build_pid=$!
fi

step "cfn-lint ${templates[*]}"
# Warnings count as failures: any output at all fails the step.
lint=$(cfn-lint "${templates[@]}" 2>&1) || true
[ -z "$lint" ] || { echo "$lint"; fail "cfn-lint reported the findings above"; }
echo "no errors, no warnings"

step "sam validate --lint"
# sam validate needs a region to resolve pseudo parameters; nothing is called in it.
sam validate --lint --template template.yaml --region us-east-1

step "checkov"
# --skip-download: checkov otherwise tries to fetch guidelines from Prisma Cloud (offline here).
# Every skip is in the templates, on its resource, with a reason.
files=(); for t in "${templates[@]}"; do files+=(-f "$t"); done
report=$(checkov "${files[@]}" --framework cloudformation \
  --quiet --compact --skip-download 2>&1) || { echo "$report"; fail "checkov found failed checks"; }
summary=$(grep -E '^Passed checks: [0-9]+, Failed checks: [0-9]+, Skipped checks: [0-9]+' <<<"$report") \
  || { echo "$report"; fail "checkov printed no summary"; }
echo "$summary"
grep -q 'Failed checks: 0,' <<<"$summary" || { echo "$report"; fail "checkov found failed checks"; }

step "checkov with ProxyFleet=create"
# checkov evaluates Conditions with the parameters' defaults: ProxyFleet=none drops the fleet's
# resources from the scan above. The same template with create as the default scans them.
fleet=$(mktemp --suffix=.yaml)
sed '/^  ProxyFleet:$/,/^  [A-Za-z]/ s/^    Default: none$/    Default: create/' template.yaml >"$fleet"
grep -q '^    Default: create$' "$fleet" || fail "could not set ProxyFleet's default to create"
report=$(checkov -f "$fleet" --framework cloudformation --quiet --compact --skip-download 2>&1) \
  || { echo "$report"; fail "checkov found failed checks with ProxyFleet=create"; }
summary=$(grep -E '^Passed checks: [0-9]+, Failed checks: [0-9]+, Skipped checks: [0-9]+' <<<"$report") \
  || { echo "$report"; fail "checkov printed no summary"; }
echo "$summary"
grep -q 'Failed checks: 0,' <<<"$summary" || { echo "$report"; fail "checkov found failed checks with ProxyFleet=create"; }

if [ -n "${SKIP_BUILD:-}" ]; then
  step "sam build skipped (SKIP_BUILD set)"
  exit 0
fi

step "sam build (cargo lambda, host architecture)"
# The template deploys arm64; the aarch64 rust-std is a toolchain download CI must not rely on,
# so the build overrides the Architecture parameter to the host's. Output goes to the
# gitignored .aws-sam/.
# e_machine in the ELF header: 3e = x86-64, b7 = AArch64.
case "$(uname -m)" in
  x86_64) arch=x86_64 machine="3e 00" ;;
  aarch64 | arm64) arch=arm64 machine="b7 00" ;;
  *) fail "unsupported host architecture $(uname -m)" ;;
esac
# The Makefile's sam-build (started above): the host's architecture for the functions and the
# layer's agent alike, every binary at the baseline CPU, so the agent shares the functions'
# target directory. make dist packages exactly this build.
built=0
wait "$build_pid" || built=$?
build_pid=
cat "$build_log"
[ "$built" -eq 0 ] || fail "sam build exited with $built"
for fn in GenerateFunction ConfigureFunction FleetReportFunction AgentPublisherFunction; do
  bin=.aws-sam/build/$fn/bootstrap
  [ -f "$bin" ] && [ -x "$bin" ] || fail "$bin is missing or not executable"
  [ "$(od -An -tx1 -j18 -N2 "$bin" | xargs)" = "$machine" ] || fail "$bin is not a $arch ELF executable"
  echo "$bin: $arch executable, $(wc -c <"$bin") bytes"
done

# The layer's root is /opt in the function: the publisher reads /opt/autoproxy-agent.
agent=.aws-sam/build/AgentLayer/autoproxy-agent
[ -f "$agent" ] && [ -x "$agent" ] || fail "$agent is missing or not executable"
[ "$(od -An -tx1 -j18 -N2 "$agent" | xargs)" = "$machine" ] || fail "$agent is not a $arch ELF executable"
version=$("$agent" version 2>&1) || fail "$agent version failed: $version"
case $version in "autoproxy-agent "*) ;; *) fail "$agent version printed '$version'" ;; esac
# Linked against an old glibc (cargo lambda through Zig): no symbol version newer than Amazon
# Linux 2023's (the version names sit in the dynamic string table: no binutils needed).
glibc=$( (grep -aoE 'GLIBC_[0-9]+\.[0-9]+(\.[0-9]+)?' "$agent" || true) | sort -uV | tail -1)
[ -z "$glibc" ] || [ "$(printf '%s\n' "$glibc" GLIBC_2.34 | sort -V | tail -1)" = GLIBC_2.34 ] ||
  fail "$agent needs $glibc; Amazon Linux 2023 has GLIBC_2.34"
echo "$agent: $arch executable, $(wc -c <"$agent") bytes, '$version', needs ${glibc:-no glibc}"

step "all template checks passed"
