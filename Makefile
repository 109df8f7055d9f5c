# Entry points. Every target installs what it needs first (.ci/tools.sh: HAProxy from Debian,
# HAProxy 3.0 built from Debian 13's source, moto server, the AWS CLI, cargo-lambda, SAM CLI,
# cfn-lint and checkov from PyPI, pinned, under ~/.cache/autoproxy), so each works on a fresh
# machine.

CACHE ?= $(HOME)/.cache/autoproxy
export PATH := $(CACHE)/bin:$(PATH)
# HAProxy 3.0, built by .ci/tools.sh (the version is its); deliberately not in $(CACHE)/bin:
# the targets that drive it put it first on PATH themselves.
HAPROXY30_VERSION := $(shell sed -n 's/^HAPROXY30_VERSION=//p' $(dir $(lastword $(MAKEFILE_LIST))).ci/tools.sh)
HAPROXY30 := $(CACHE)/haproxy-$(HAPROXY30_VERSION)/bin
export CARGO_TERM_COLOR ?= never

.PHONY: test test-dist test-haproxy30 lint unit templates tools core-tools bench demo demo-release local dist sam-build build-AgentLayer

## Everything CI runs: lint, every test (unit, golden, moto, real HAProxy), template checks,
## on the distribution's HAProxy (2.6 on Debian 12); then the tests that drive a real HAProxy
## again on 3.0; last the release bundle's test, whose `make dist` finds the template checks'
## `sam build` done (it runs after them, with the same SUITE_RELEASE profile).
## Each step's start is stamped (UTC), so a run's log shows where its time went.
test: tools
	@date -u +"test: %T lint, and the tests' build beside it"
	cargo fmt --all -- --check
	@$(LINT_BESIDE_BUILD)
	@date -u +"test: %T the tests, on $$(haproxy -v | head -n 1)"
	cargo test --workspace -- --skip release_bundle:: --test-threads=$(TEST_THREADS)
	@date -u +"test: %T template checks"
	$(SUITE_RELEASE) bash .ci/check-templates.sh
	@date -u +"test: %T HAProxy 3.0"
	@$(MAKE) --no-print-directory test-haproxy30
	@date -u +"test: %T release bundle"
	@$(SUITE_RELEASE) $(MAKE) --no-print-directory test-dist
	@date -u +"test: %T done"

## clippy and the tests' build at once: clippy's is a check build, which shares nothing with a
## build, and both have long stretches on one core (the largest crates' front ends: the SDK
## clients, the test crate), so side by side they end sooner: 348 s on a clean clone on 2
## cores (603 s when the EC2 SDK was still built, against 225 s + 455 s one after the other
## then). clippy in its own
## target directory (cargo locks one directory per build), its output shown after the build's.
LINT_TARGET_DIR = $${CARGO_TARGET_DIR:-target}/lint
LINT_BESIDE_BUILD = log=$$(mktemp); \
  { CARGO_TARGET_DIR="$(LINT_TARGET_DIR)" cargo clippy --workspace --all-targets -- -D warnings \
      >"$$log" 2>&1; echo $$? >"$$log.rc"; } & \
  cargo test --workspace --no-run; built=$$?; wait; \
  echo "clippy --workspace --all-targets -- -D warnings:"; cat "$$log"; linted=$$(cat "$$log.rc"); \
  rm -f "$$log" "$$log.rc"; [ "$$built" -eq 0 ] && [ "$$linted" -eq 0 ]

## Tests run at once in the integration suite. Most of its time is waiting (a queue's window, a
## reload, a frozen worker's deadline, moto), not computing: on 2 cores the `it` run took
## 784 s with the default of one test per core and 600-664 s with 4, its processes then using
## about 60 % of the two cores. 4 at once also made moto fail more often under concurrent
## calls (an SQS 500 of its own, an account's default VPC made late): 3.
TEST_THREADS ?= 3

## The suite's build of the release binaries (the template checks' `sam build`, which the release
## bundle's test packages): the release profile without its optimisation (opt-level 0, no LTO,
## 16 codegen units). What the suite checks of that build (the template builds; each binary is
## there, for its architecture, against an old enough glibc, and runs; the bundle packages and
## deploys without a toolchain) does not depend on how far the code is optimised; the full
## profile took 803 s of 2 cores, this one 260 s. `make templates`, `make dist`, `sam build`
## and `make bench` (which measures the shipped binaries' sizes and speed) keep the full profile.
SUITE_RELEASE := CARGO_PROFILE_RELEASE_OPT_LEVEL=0 CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16

## The release bundle's test (it::release_bundle): make dist, unpacked elsewhere without a Rust
## toolchain, packaged with the SAM CLI and the AWS CLI against moto's S3.
test-dist: tools
	cargo test --workspace --test it -- release_bundle::

## The other end of the supported range: the tests in which HAProxy's own behaviour decides
## the outcome run again, with HAProxy 3.0 (built by .ci/tools.sh) first on PATH, where both
## the harness and the agent's `haproxy -c` find it: haproxy -c of the golden configs; the
## runtime API's commands and answers; installs, route changes without a reload, reloads
## through the master (under load, with held and long sessions), repairs and rollbacks; the
## address service's map updates; the data plane, its counters and exporter; end to end.
## Not again: what the agent decides alone whatever HAProxy answers (its fault bounds and
## orphans, the launcher's checksum, fsyncs, the document's text, the borders' judgment) and
## the address service's DNS, rate and CloudWatch figures; they ran on 2.6 above.
## haproxy_version:: fails the run if the haproxy on PATH is not 3.0. `--workspace`, as `test`
## builds: with `-p autoproxy-tests` cargo resolves the dependencies' features for that
## package alone and builds them all again (90 s of CI).
HAPROXY_TESTS := haproxy_version:: golden:: runtime_api:: dataplane:: metrics:: e2e:: \
  apply::install:: apply::runtime:: apply::repair:: apply::concurrency:: apply::held:: \
  apply::held_in_time:: apply::long_sessions:: apply::running:: apply::truth:: apply::loops:: \
  resolver::changes:: resolver::ensure::
test-haproxy30: core-tools
	@PATH="$(HAPROXY30):$$PATH" haproxy -v | head -n 1
	PATH="$(HAPROXY30):$$PATH" AUTOPROXY_EXPECT_HAPROXY=3.0 \
	  cargo test --workspace --test it -- $(HAPROXY_TESTS) --test-threads=$(TEST_THREADS)

## Formatting and clippy, warnings as errors.
lint:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

## The pure core only: no moto, no HAProxy; seconds.
unit:
	cargo test --workspace --lib --bins

## cfn-lint, sam validate --lint, checkov, sam build.
templates: tools
	bash .ci/check-templates.sh

# Route counts of the HAProxy floor's run (bench_dataplane --floor).
FLOOR_ROUTES ?= 4000,10000

## The scale benchmark: seeds moto with 2,000 zones x 200 records in 10 accounts,
## sweeps through per-account recording proxies, renders, runs haproxy -c, sizes the Lambda
## binaries, then sweeps 10,000 zones in 50 accounts four times, the members named by role ARNs or
## listed from an organization's unit (calls, time, peak memory side by side); prints
## the table and writes docs/BENCHMARKS.md. Smaller: BENCH_ARGS="--zones 400 --scale-zones 0".
## With BENCH_ARGS="--organizations true" the member accounts are created in an organization's
## unit in moto and the generator lists them from it (MEMBER_ACCOUNTS), counting the calls.
## The binaries are (re)built for the host arch (x86_64 here; arm64 needs a toolchain download);
## cargo-lambda links through the Zig its venv carries (.ci/zig.sh finds it, for both).
## Then the data-plane benchmark (about 3 min, as root: HAProxy runs in a private mount
## namespace with a counting DNS server): CPU per connection, DNS queries, check, start and
## reload times, idle CPU and failed connections across reloads, for 1,000 and 10,000 routes,
## the per-route template against the map-based one; the reject counters' cost per connection
## at 10,000 routes (the default template against the map-based one before them, both running,
## measured in turns), and the route share's (the default template against itself without the
## stick table's rules); then the apply document's 20 route-only
## changes (no reload) with connections and a kubectl watch held through the proxy (kubectl
## and openssl on PATH); then a cold first install of 4,000 and 10,000 routes (about 3 min: the
## address service fills at up to 800 queries/s, an apply follows 1 s after the first, and the
## queries after the fill are watched for 60 s); its section goes at the end of
## docs/BENCHMARKS.md. Quicker: DATAPLANE_ARGS="--routes 1000 --before-reloads 0 --cold 1000
## --counters 1000 --share 1000".
## Then the HAProxy floor (about 2 min), on the distribution's HAProxy: at FLOOR_ROUTES routes,
## the published config against a minimal hand-written one doing the same passthrough, and
## each of the published config's pieces, all running at once and measured in turns (worker
## CPU per connection), and the time to the backend's first byte direct, through one and
## through the other, idle and loaded; its section goes at the end of docs/BENCHMARKS.md.
## The data-plane benchmark runs on the distribution's HAProxy (2.6 on Debian 12), then again
## (as long again) with HAProxy 3.0 first on PATH, into a section of its own after it
## ("Data plane on HAProxy 3.0"; AUTOPROXY_EXPECT_HAPROXY stops it on any other version).
## Last, bench_records prints what reading one zone holds (peak RSS, 500 and 50,000 record
## sets, every A and CNAME kept as before against the rules' sieve), in memory, in seconds.
bench: core-tools
	. .ci/zig.sh && cargo lambda build --release -p autoproxy-generate -p autoproxy-configure
	$(AGENT_BUILD)
	cargo build --profile bench-run -p autoproxy-tests --bin bench --bin bench_sweep --bin bench_dataplane --bin bench_records
	target/bench-run/bench $(BENCH_ARGS)
	AUTOPROXY_AGENT_BINARY="$(AGENT_BINARY)" target/bench-run/bench_dataplane $(DATAPLANE_ARGS)
	target/bench-run/bench_dataplane --skip-before --skip-after --cold 0 --counters 0 --share 0 \
	  --no-agent --floor $(FLOOR_ROUTES)
	PATH="$(HAPROXY30):$$PATH" AUTOPROXY_EXPECT_HAPROXY=3.0 \
	  AUTOPROXY_AGENT_BINARY="$(AGENT_BINARY)" \
	  target/bench-run/bench_dataplane --haproxy-section $(DATAPLANE_ARGS)
	target/bench-run/bench_records

## The whole pipeline on this machine, narrated: moto as AWS (two accounts), both
## functions through the Lambda runtime (cargo lambda watch/invoke), the apply document from
## template.yaml against a real HAProxy on loopback, dnsmasq as the VPC resolver, openssl
## s_server backends. Then a cluster is added and one removed in Route53 and their CloudTrail
## events flow through. Files in .demo/ (gitignored); everything it starts is stopped, Ctrl-C too.
demo:
	bash .ci/tools.sh core >/dev/null
	cargo run --quiet -p autoproxy-tests --bin demo

## The demo with the agent the stack ships (the release build `sam build` and `make bench`
## make, 7 MB) in place of the workspace's debug build (32 MB stripped): each instance's apply
## downloads and hashes it, so the timings are those of a deployed fleet's apply (event to
## serving 0.9 to 1.1 s on 2 cores, against 1.2 to 1.9 s with the debug agent). The release
## agent's build takes 6 min cold on 2 cores, 1.7 min when only the workspace's crates changed;
## `make bench` and `make dist` build the same.
demo-release: core-tools
	$(AGENT_BUILD)
	AUTOPROXY_AGENT_BINARY="$(AGENT_BINARY)" cargo run --quiet -p autoproxy-tests --bin demo

## The AWS stand-in for invoking the functions by hand (README, "Invoking by hand"): moto on
## 127.0.0.1:5000 seeded with the sample zones, the bucket, the apply document and two tagged
## instances; writes .local/env for `cargo lambda watch --env-file .local/env`. Ctrl-C stops it.
local: core-tools
	cargo run -q -p autoproxy-tests --bin local

## The release bundle, dist/autoproxy-<version>.tar.gz (the workspace's version), and
## dist/SHA256SUMS: template.yaml with its functions and AgentLayer pointing at prebuilt zips
## inside the bundle, narrowed to the architecture built and stamped with the version and the
## commit; the zips; docs/member-account.yaml, docs/central-forwarding.yaml and the deploy docs
## at their paths; LICENSE, CHANGELOG.md, the third-party notices and a README for a first
## deploy. It deploys with the SAM CLI or the AWS CLI alone (docs/DEPLOY.md, "Deploying a release
## without a Rust toolchain"). Built for this machine's architecture, functions and agent alike
## (x86_64 here: no aarch64 target), by `make sam-build`, the build .ci/check-templates.sh
## checks: after it (as in `make test`) cargo finds everything built. The notices come from
## Cargo.lock through cargo-about (.ci/about.toml, .ci/about.hbs; a crate under a licence it
## does not accept stops here), which reads every locked crate's sources: `cargo fetch` brings
## them (once; minutes on a fresh machine). tests/src/dist.rs says how the copy is made. The
## writer is built with --workspace, as `cargo test --workspace` builds (with -p cargo resolves
## the dependencies' features for one package and builds them all again).
dist: tools sam-build
	cargo fetch --locked -q
	mkdir -p dist && cargo about generate --frozen -c .ci/about.toml .ci/about.hbs -o dist/THIRD-PARTY-NOTICES.md
	cargo build -q --workspace --bin dist && "$${CARGO_TARGET_DIR:-target}/debug/dist"

## `sam build` of template.yaml for this machine's architecture (the Architecture parameter and
## the agent's alike) into .aws-sam/build: the four functions (cargo lambda, through SAM) and
## the AgentLayer (build-AgentLayer below). Every binary at the architecture's baseline CPU
## (RUSTFLAGS; cargo lambda would tune the functions for Lambda's hosts, and they wait on AWS
## APIs, not on the CPU): with one set of flags the functions and the agent share one target
## directory, and each dependency is compiled once, not once for each.
sam-build:
	. .ci/zig.sh && SAM_CLI_TELEMETRY=0 AGENT_ARCH=$(HOST_ARCH) RUSTFLAGS="-C target-cpu=$(AGENT_CPU_$(HOST_ARCH)) $(REMAP_PATHS)" \
	  CFLAGS="$(BUILD_CFLAGS)" \
	  sam build --template template.yaml --build-dir .aws-sam/build --cache-dir .aws-sam/cache \
	  --parameter-overrides "Architecture=$(HOST_ARCH)"
HOST_ARCH := $(patsubst aarch64,arm64,$(shell uname -m))

## The AgentLayer layer, for `sam build` (template.yaml, BuildMethod: makefile): the
## autoproxy-agent binary the proxy instances run, put at the layer's root, /opt/autoproxy-agent.
## For the instances' architecture, not the functions': x86_64, or `AGENT_ARCH=arm64 sam build`
## (that needs `rustup target add aarch64-unknown-linux-gnu`). SAM sets ARTIFACTS_DIR; the build
## runs in this workspace (cargo needs all of it).
build-AgentLayer:
	@[ -n "$(AGENT_TARGET_$(AGENT_ARCH))" ] || { echo "AGENT_ARCH: expected x86_64 or arm64, got '$(AGENT_ARCH)'" >&2; exit 2; }
	@[ -n "$(ARTIFACTS_DIR)" ] || { echo "ARTIFACTS_DIR: not set (sam build sets it)" >&2; exit 2; }
	cd "$(WORKSPACE)" && $(AGENT_BUILD)
	mkdir -p "$(ARTIFACTS_DIR)"
	cp "$(AGENT_BINARY)" "$(ARTIFACTS_DIR)/autoproxy-agent"
	chmod 0755 "$(ARTIFACTS_DIR)/autoproxy-agent"

## How autoproxy-agent is built, for the layer and for `make bench` alike (the benchmark measures
## the binary the stack ships): cargo lambda, linked through Zig against an old glibc (it runs on
## Amazon Linux 2023, Debian 12, Ubuntu 24.04), for the architecture's baseline CPU. cargo lambda
## would tune it for Lambda's hosts (haswell, neoverse-n1); the proxies are any EC2 instance, and
## the agent waits on HAProxy and DNS, not on the CPU. RUSTFLAGS replaces cargo lambda's flags.
AGENT_ARCH ?= x86_64
AGENT_TARGET_x86_64 := x86_64-unknown-linux-gnu
AGENT_TARGET_arm64 := aarch64-unknown-linux-gnu
AGENT_CPU_x86_64 := x86-64
AGENT_CPU_arm64 := generic
## The agent's flags, and its target directory. Under `make sam-build` every release binary is
## built with these flags and the agent shares the functions' target directory. Under any other
## build (a plain `sam build`, `make bench`) the functions have cargo lambda's flags, which
## configure the host's build scripts and proc macros differently ("the config settings
## changed"): in one directory each build would make the other's stale, so the agent keeps its
## own. `--bin`, not `-p`: cargo then resolves features over the default members, as for the
## functions' `--bin` builds, and builds each dependency once for all of them.
WORKSPACE := $(patsubst %/,%,$(dir $(abspath $(lastword $(MAKEFILE_LIST)))))
## The build machine's paths, in every release binary: the workspace's as `autoproxy`, cargo's
## (the crates' sources) as `cargo`. Panic messages and debug info then name `autoproxy/shared/…`
## and `cargo/registry/src/…`, not the build machine's directories (rustc names its own
## library `/rustc/<commit>` already).
CARGO_HOME_DIR := $(or $(CARGO_HOME),$(HOME)/.cargo)
REMAP_PATHS := --remap-path-prefix=$(WORKSPACE)=autoproxy --remap-path-prefix=$(CARGO_HOME_DIR)=cargo
## The same for the C that aws-lc-sys compiles (its `__FILE__`s, in error reports, and debug
## info): rustc's flag does not reach the C compiler; the cc crate adds CFLAGS to every C
## compile (Zig's clang, through cargo-zigbuild, takes the flag). aws-lc-sys maps its own
## directory away itself only at opt-level 3 (the suite's build is opt-level 0).
## Added once to any CFLAGS given: the agent's build, under `sam build` from `make sam-build`,
## sees the same value as the functions' and shares their build of aws-lc-sys.
REMAP_CFLAGS := -ffile-prefix-map=$(CARGO_HOME_DIR)=cargo
BUILD_CFLAGS := $(strip $(filter-out $(REMAP_CFLAGS),$(CFLAGS)) $(REMAP_CFLAGS))
AGENT_RUSTFLAGS := -C target-cpu=$(AGENT_CPU_$(AGENT_ARCH)) $(REMAP_PATHS)
ifeq ($(strip $(RUSTFLAGS)),$(strip $(AGENT_RUSTFLAGS)))
AGENT_TARGET_DIR := $(or $(CARGO_TARGET_DIR),$(WORKSPACE)/target)
else
AGENT_TARGET_DIR := $(WORKSPACE)/target/agent
endif
AGENT_BINARY := $(AGENT_TARGET_DIR)/lambda/autoproxy-agent/bootstrap
AGENT_BUILD = . .ci/zig.sh && CARGO_TARGET_DIR="$(AGENT_TARGET_DIR)" RUSTFLAGS="$(AGENT_RUSTFLAGS)" CFLAGS="$(BUILD_CFLAGS)" \
  cargo lambda build --release --bin autoproxy-agent --target $(AGENT_TARGET_$(AGENT_ARCH))

tools:
	bash .ci/tools.sh all >/dev/null

core-tools:
	bash .ci/tools.sh core >/dev/null
