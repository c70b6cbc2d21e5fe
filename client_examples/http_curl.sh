#!/usr/bin/env bash
# The KServe v2 HTTP/REST protocol by hand, with curl (as health probes and scripts use it).
#
#   client_examples/http_curl.sh [-u HOST:PORT]          (default localhost:8000)
#
# Needs Triton's `simple` model (serve tests/models). Every call must succeed (curl -f);
# prints PASS: http_curl at the end.
set -euo pipefail
URL=localhost:8000
if [ "${1:-}" = "-u" ]; then URL=$2; shift 2; fi
C=(curl -sSf --max-time 30)

echo "+ health"
"${C[@]}" -o /dev/null "http://$URL/v2/health/live"
"${C[@]}" -o /dev/null "http://$URL/v2/health/ready"
"${C[@]}" -o /dev/null "http://$URL/v2/models/simple/ready"

echo "+ server and model metadata, config"
"${C[@]}" "http://$URL/v2"; echo
"${C[@]}" "http://$URL/v2/models/simple"; echo
"${C[@]}" "http://$URL/v2/models/simple/config" | head -c 200; echo

echo "+ inference with JSON tensors (nested data, one output requested)"
body='{"id":"curl-1","inputs":[
  {"name":"INPUT0","datatype":"INT32","shape":[1,16],"data":[[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]]},
  {"name":"INPUT1","datatype":"INT32","shape":[1,16],"data":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}],
  "outputs":[{"name":"OUTPUT0"}]}'
out=$("${C[@]}" -H 'Content-Type: application/json' -d "$body" "http://$URL/v2/models/simple/infer")
echo "$out"
case "$out" in
  *'"data":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]'*) ;;
  *) echo "FAILED: unexpected OUTPUT0" >&2; exit 1 ;;
esac

echo "+ the same request gzip-compressed, response compressed too"
out=$(printf '%s' "$body" | gzip -c | "${C[@]}" --compressed -H 'Content-Encoding: gzip' \
  -H 'Content-Type: application/json' --data-binary @- "http://$URL/v2/models/simple/infer")
case "$out" in *'"id":"curl-1"'*) ;; *) echo "FAILED: $out" >&2; exit 1 ;; esac

echo "+ an error: wrong datatype -> 400 with {\"error\": ...}"
code=$(curl -s -o /tmp/fpgaserve_curl_err.$$ -w '%{http_code}' -H 'Content-Type: application/json' \
  -d '{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,16],"data":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]},
       {"name":"INPUT1","datatype":"INT32","shape":[1,16],"data":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]}]}' \
  "http://$URL/v2/models/simple/infer")
cat /tmp/fpgaserve_curl_err.$$; echo; rm -f /tmp/fpgaserve_curl_err.$$
[ "$code" = 400 ] || { echo "FAILED: expected 400, got $code" >&2; exit 1; }

echo "+ statistics and repository index"
"${C[@]}" "http://$URL/v2/models/simple/stats" | head -c 300; echo
"${C[@]}" -X POST "http://$URL/v2/repository/index"; echo
echo "PASS: http_curl"
