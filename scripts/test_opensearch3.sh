#!/usr/bin/env bash
# The OpenSearch 3.x tier: start the embedded 3.x node (Maven Central; Java 21+ picked for it, its own state folder
# and a free port, so a running 2.19 node is left alone), run the opensearch3 checks and semdup's OpenSearch
# integration tests against it, and stop the node again if this script started it.
#   bash scripts/test_opensearch3.sh [pytest args...]      # version: $SEMDUP_OPENSEARCH3_VERSION, else NEWEST_3X_VERSION
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bootstrap.sh
version="${SEMDUP_OPENSEARCH3_VERSION:-$(python -c 'from semdup.devstack.opensearch_distribution import NEWEST_3X_VERSION as v; print(v)')}"
port="${SEMDUP_OPENSEARCH3_PORT:-$(python -c 'from semdup.devstack.local_process import any_free_port as f; print(f())')}"
started=0
url="$(python -m semdup opensearch status --version "$version" | cut -d' ' -f1)" || url=""
if [ -z "$url" ]; then
  url="$(python -m semdup opensearch start --version "$version" --port "$port" --timeout 300)"
  started=1
fi
stop_node() { [ "$started" = 1 ] && python -m semdup opensearch stop --version "$version" >&2 || true; }
trap stop_node EXIT
echo "OpenSearch $version at $url" >&2
SEMDUP_OPENSEARCH_URL="$url" SEMDUP_TEST_OPENSEARCH3="$url" python -m pytest -p no:cacheprovider -m "not broker" \
  tests/integration/test_opensearch3.py \
  tests/integration/test_devstack_opensearch.py \
  tests/integration/test_search_templates.py \
  tests/integration/test_index_design_packed.py \
  tests/integration/test_reranker_parity.py \
  tests/integration/test_query_robustness.py \
  tests/integration/test_fusion_variants_service.py \
  tests/integration/test_reranker_service.py \
  tests/integration/test_service_access.py \
  tests/integration/test_service_schema_fuzz.py \
  tests/integration/test_eval_cli.py \
  "$@"
