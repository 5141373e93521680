#!/usr/bin/env bash
# The test command: installs what is missing (cached), then runs every tier — unit, opensearch, broker, slow, multinode —
# against a real OpenSearch (local Maven distribution, started by the fixtures) and a real Redis + Celery worker.
# GPU tests skip where no GPU is present and say so.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bootstrap.sh
# Imports only point down (contracts in pyproject.toml); a wrong arrow fails here, before any test runs.
lint-imports --no-cache
exec python -m pytest -p no:cacheprovider "$@"
