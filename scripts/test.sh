#!/usr/bin/env bash
# The project's tests. As root with the brokers installed (.ci/run installs them) every test runs;
# elsewhere a test that needs a missing component prints why it skips (with CI=true it fails instead).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo nextest run --workspace --no-fail-fast "$@"
