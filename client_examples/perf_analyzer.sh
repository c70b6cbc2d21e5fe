#!/usr/bin/env bash
# perf_analyzer (NVIDIA's C++ load generator for Triton) against fpgaserve.
#
#   client_examples/perf_analyzer.sh [-u HOST:PORT] [MODEL...]      MODEL: facile (default), simple
#   PROTOCOL=http client_examples/perf_analyzer.sh -u localhost:8000 facile    (HTTP/REST)
#
# Uses ${PERF_ANALYZER:-perf_analyzer}. Get release 2.49 (the newest whose binary runs on
# glibc 2.36 / Debian 12) with:
#   bash ../shared/tools/get-perf-analyzer .tools/perf-analyzer
#   export PERF_ANALYZER=$PWD/.tools/perf-analyzer/perf_analyzer
#
# Serve the models first:   fpgaserve --model-repository bitstreams                    (facile)
#                           fpgaserve --model-repository bitstreams --model-repository tests/models   (+ simple)
#
# Notes on the flags:
#   -i grpc            perf_analyzer defaults to HTTP; PROTOCOL=http runs the same commands over
#                      HTTP/REST (port 8000: binary tensors; --input-tensor-format json and
#                      --output-tensor-format json send JSON instead); --streaming is gRPC only
#   -p 2000 -s 25      2 s measurement windows, 25 % stability band: a Python server on a
#                      busy machine rarely meets the default 10 % ("Failed to obtain stable
#                      measurement")
#   --async            one request id per request; responses are matched by the echoed id
#   --streaming        one ModelStreamInfer stream per concurrency slot
#   -b N               rows per request (the batch dimension); the server rejects
#                      N > max_batch_size (simple: 8, facile: 16384)
# The "Server:" block of each result comes from ModelStatistics deltas (queue, compute
# input/infer/output); fpgaserve advertises the 'statistics' extension, so it is printed.
set -euo pipefail

PA=${PERF_ANALYZER:-perf_analyzer}
PROTOCOL=${PROTOCOL:-grpc}
if [ "$PROTOCOL" = http ]; then URL=localhost:8000; else URL=localhost:8001; fi
if [ "${1:-}" = "-u" ]; then URL=$2; shift 2; fi
MODELS=("${@:-facile}")
OUT=${OUT:-$(mktemp -d)}   # CSV reports land here

run() {  # echo the command, run it; rc 2 ("unstable measurement") is reported, not fatal
  echo "+ $PA $*"
  local rc=0
  "$PA" "$@" || rc=$?
  if [ "$rc" = 2 ]; then
    echo "(unstable measurement: a busy machine; try a longer -p or a wider -s)" >&2
  elif [ "$rc" != 0 ]; then
    echo "perf_analyzer failed with exit code $rc" >&2
    exit "$rc"
  fi
}

for model in "${MODELS[@]}"; do
  A=(-m "$model" -u "$URL" -i "$PROTOCOL")
  case "$model" in
  facile)
    # One "event" of ~16k HCAL channels per request, as CMSSW's SonicTriton sends it.
    # Synchronous: N threads each blocking on one ModelInfer at a time.
    run "${A[@]}" -b 16000 --concurrency-range 1:4 -p 2000 -s 25 -f "$OUT/facile_sync.csv"
    # Asynchronous: requests in flight per concurrency level, matched by id.
    run "${A[@]}" -b 16000 --async --concurrency-range 2:8:2 -p 2000 -s 25 -f "$OUT/facile_async.csv"
    # Streaming: one bidirectional ModelStreamInfer stream per concurrency slot (gRPC only).
    [ "$PROTOCOL" = http ] || run "${A[@]}" -b 16000 --streaming --concurrency-range 1:4 -p 2000 -s 25 -f "$OUT/facile_stream.csv"
    # Exact request budget instead of time windows: 200 requests, no stability loop.
    run "${A[@]}" -b 16000 --concurrency-range 4 --request-count 200
    # Inputs and outputs through system shared memory (client and server on one host);
    # the output region must hold 16000 rows x 1 x 4 bytes.
    run "${A[@]}" -b 16000 --shared-memory system --output-shared-memory-size 64000 --concurrency-range 1 --request-count 50
    ;;
  simple)
    # Triton's example model: INT32 [16] add/sub, max_batch_size 8.
    run "${A[@]}" --concurrency-range 1:8:2 -p 2000 -s 25 -f "$OUT/simple_sync.csv"
    run "${A[@]}" --async -b 8 --concurrency-range 1:16:4 -p 2000 -s 25 -f "$OUT/simple_async.csv"
    [ "$PROTOCOL" = http ] || run "${A[@]}" --streaming --concurrency-range 1:8 -p 2000 -s 25 -f "$OUT/simple_stream.csv"
    # JSON tensors instead of binary ones (HTTP only)
    [ "$PROTOCOL" != http ] || run "${A[@]}" --input-tensor-format json --output-tensor-format json --concurrency-range 1:4 -p 2000 -s 25
    # Must fail: 16 > max_batch_size 8; perf_analyzer does not check, the server rejects
    # with "inference request batch-size must be <= 8 for 'simple'" and PA exits 99.
    echo "+ $PA ${A[*]} -b 16 --concurrency-range 1 -p 500   (expected to fail)"
    if "$PA" "${A[@]}" -b 16 --concurrency-range 1 -p 500; then
      echo "unexpected: batch 16 on simple was accepted" >&2
      exit 1
    fi
    ;;
  *)
    # Any other model: a short synchronous sweep with its own defaults.
    run "${A[@]}" --concurrency-range 1:4 -p 2000 -s 25 -f "$OUT/${model//\//_}.csv"
    ;;
  esac
done
echo "CSV reports in $OUT"
