#!/usr/bin/env bash
# The main job on the embedded default: local OpenSearch (and Redis) started for you, then `semdup demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bootstrap.sh
exec semdup demo "$@"
