# Entry points. Every target installs what it needs first (.ci/tools.sh: HAProxy from Debian,
# moto server, the AWS CLI, cargo-lambda, SAM CLI, cfn-lint and checkov from PyPI, pinned, in
# venvs under ~/.cache/autoproxy), so each works on a fresh machine.

CACHE ?= $(HOME)/.cache/autoproxy
export PATH := $(CACHE)/bin:$(PATH)
export CARGO_TERM_COLOR ?= never

.PHONY: test lint unit templates tools core-tools bench demo local

## Everything CI runs: lint, every test (unit, golden, moto, real HAProxy), template checks.
test: tools lint
	cargo test --workspace
	bash .ci/check-templates.sh

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

## The scale benchmark: seeds moto with 2,000 zones x 200 records in 10 accounts,
## sweeps through per-account recording proxies, renders, runs haproxy -c, sizes the Lambda
## binaries, then sweeps 10,000 zones in 50 accounts for the generator's peak memory; prints
## the table and writes docs/BENCHMARKS.md. Smaller: BENCH_ARGS="--zones 400 --memory-zones 0".
## The binaries are (re)built for the host arch (x86_64 here; arm64 needs a toolchain download);
## cargo-lambda links through the Zig its venv carries (.ci/zig.sh finds it, for both).
## Then the data-plane benchmark (about 3 min, as root: HAProxy runs in a private mount
## namespace with a counting DNS server): CPU per connection, DNS queries, check, start and
## reload times, idle CPU and failed connections across reloads, for 1,000 and 10,000 routes,
## the per-route template against the map-based one; its section goes at the end of
## docs/BENCHMARKS.md. Quicker: DATAPLANE_ARGS="--routes 1000 --before-reloads 0".
bench: core-tools
	. .ci/zig.sh && cargo lambda build --release -p autoproxy-generate -p autoproxy-configure -p autoproxy-agent
	cargo build --profile bench-run -p autoproxy-tests --bin bench --bin bench_sweep --bin bench_dataplane
	target/bench-run/bench $(BENCH_ARGS)
	AUTOPROXY_AGENT_BINARY=target/lambda/autoproxy-agent/bootstrap target/bench-run/bench_dataplane $(DATAPLANE_ARGS)

## The whole pipeline on this machine, narrated: moto as AWS (two accounts), both
## functions through the Lambda runtime (cargo lambda watch/invoke), the apply document from
## template.yaml against a real HAProxy on loopback, dnsmasq as the VPC resolver, openssl
## s_server backends. Then a cluster is added and one removed in Route53 and their CloudTrail
## events flow through. Files in .demo/ (gitignored); everything it starts is stopped, Ctrl-C too.
demo:
	bash .ci/tools.sh core >/dev/null
	cargo run --quiet -p autoproxy-tests --bin demo

## The AWS stand-in for invoking the functions by hand (README, "Invoking by hand"): moto on
## 127.0.0.1:5000 seeded with the sample zones, the bucket, the apply document and two tagged
## instances; writes .local/env for `cargo lambda watch --env-file .local/env`. Ctrl-C stops it.
local: core-tools
	cargo run -q -p autoproxy-tests --bin local

tools:
	bash .ci/tools.sh all >/dev/null

core-tools:
	bash .ci/tools.sh core >/dev/null
