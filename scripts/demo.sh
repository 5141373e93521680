#!/usr/bin/env bash
# The main job on the embedded default: local OpenSearch (and Redis) started for you, then `semdup demo`:
# the hybrid default built from packages (no GPU) and fitted on each set's dev data, indexed by a Celery worker,
# answered by the reranker, printed beside the six lexical models and the MiniLM peer.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bootstrap.sh
exec semdup demo "$@"
