#!/usr/bin/env bash
# Runs Airlock's whole test suite: installs prerequisites, checks formatting and lints, builds the
# sandbox images, and runs unit and integration tests against the real Docker engine.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-prereqs.sh
cargo fmt --all -- --check
cargo clippy --all-targets --locked -- -D warnings
cargo build --locked
./target/debug/airlock images build --images-dir images
cargo test --locked -- --test-threads 2
