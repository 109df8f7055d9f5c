# Entry points. Every target installs what it needs first (.ci/tools.sh: HAProxy from Debian,
# moto server, the AWS CLI, cargo-lambda, SAM CLI, cfn-lint and checkov from PyPI, pinned, in
# venvs under ~/.cache/autoproxy), so each works on a fresh machine.

CACHE ?= $(HOME)/.cache/autoproxy
export PATH := $(CACHE)/bin:$(PATH)
export CARGO_TERM_COLOR ?= never

.PHONY: test lint unit templates tools core-tools

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

tools:
	bash .ci/tools.sh all >/dev/null

core-tools:
	bash .ci/tools.sh core >/dev/null
