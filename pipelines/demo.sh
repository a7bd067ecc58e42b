#!/usr/bin/env bash
# make pipeline-demo: both example jobs end to end against a local `boltmq dev`.
#
#   1. start `boltmq dev` on free ports with a fresh data directory (background);
#   2. send sample events (pipelines.events: keys, tags, JSON event time + value);
#   3. run the streaming job once with availableNow (pipelines.window_aggregates);
#   4. print the window aggregates it wrote (pipelines.window_report);
#   5. run the batch job on the dev store directory (pipelines.store_export);
#   6. stop the cluster (SIGTERM) and check it stopped cleanly; the trap also
#      stops it when a step fails or the demo is interrupted.
#
# DEMO_DIR=path keeps the data, checkpoint and export there (default: a temp
# directory, removed at the end). PY and BOLTMQ name the interpreter and CLI.
set -euo pipefail

PY=${PY:-.venv/bin/python}
BOLTMQ=${BOLTMQ:-.venv/bin/boltmq}
START_TIMEOUT_S=60
EVENTS=${EVENTS:-2000}

if [ -n "${DEMO_DIR:-}" ]; then
    work=$DEMO_DIR
    mkdir -p "$work"
    keep=1
else
    work=$(mktemp -d "${TMPDIR:-/tmp}/boltmq-pipeline-demo.XXXXXX")
    keep=0
fi
dev_pid=""

stop_cluster() {
    # SIGTERM: `boltmq dev` stops every service and exits 0 only if all stopped cleanly.
    local pid=$dev_pid
    dev_pid=""
    [ -n "$pid" ] || return 0
    kill -TERM "$pid" 2>/dev/null || true
    local code=0
    wait "$pid" || code=$?
    tail -n 1 "$work/dev.log"
    return "$code"
}

cleanup() {
    local code=$?
    trap - EXIT INT TERM
    if [ -n "$dev_pid" ]; then
        echo "== stopping the cluster after a failure (exit $code)"
        stop_cluster || true
        echo "-- last lines of the cluster's output:"
        tail -n 20 "$work/dev.log" || true
    fi
    if [ "$keep" = 0 ]; then rm -rf "$work"; fi
    exit "$code"
}
trap cleanup EXIT INT TERM

echo "== starting boltmq dev in $work"
"$BOLTMQ" dev --data-dir "$work/data" --registry-port 0 --store-port 0 --broker-port 0 \
    --no-console --mqtt-port -1 \
    >"$work/dev.log" 2>&1 &
dev_pid=$!
registry=""
for _ in $(seq $((START_TIMEOUT_S * 10))); do
    if grep -q "press Ctrl-C" "$work/dev.log"; then
        registry=$(awk '$1 == "registry" { print $2 }' "$work/dev.log")
        break
    fi
    kill -0 "$dev_pid" 2>/dev/null || { echo "boltmq dev exited:"; cat "$work/dev.log"; exit 1; }
    sleep 0.1
done
[ -n "$registry" ] || { echo "boltmq dev did not start within ${START_TIMEOUT_S}s"; exit 1; }
echo "registry at $registry"

echo "== sending $EVENTS sample events to DemoEvents"
"$PY" -m pipelines.events --registry "$registry" --topic DemoEvents --count "$EVENTS" \
    --keys 3 --tags click,view --span 5m

echo "== streaming job: 1m windows, 30s watermark, availableNow"
"$PY" -m pipelines.window_aggregates --registry "$registry" --input DemoEvents \
    --output DemoWindows --checkpoint "$work/checkpoint" --window 1m --watermark 30s \
    --available-now

echo "== window aggregates in DemoWindows"
"$PY" -m pipelines.window_report --registry "$registry" --topic DemoWindows

echo "== batch job: the store directory to Parquet + per-topic statistics"
"$PY" -m pipelines.store_export "$work/data/store" --output "$work/export" --overwrite

echo "== stopping the cluster"
stop_cluster
if [ "$keep" = 1 ]; then echo "data, checkpoint and export kept in $work"; fi
