#!/usr/bin/env bash
# Benchmarks jobs over HTTP against `airlock run` on the same job, in the same run:
#   1. `true`: airlock run (one process, one job) vs job.submit to settled over HTTP, and the
#      submit-to-start latency (queued_at -> started_at, the server's own clock).
#   1b. the same job as its client sees it (submit, then its followed log to the settle line)
#      against `docker run --rm --network none` of the same image, interleaved (target 0.9x);
#   2. a job writing BYTES (default 1 GiB) of output: its duration with no follower vs with a
#      follower reading `GET /api/v1/jobs/<id>/log?follow=1` to the end, and the daemon's peak
#      resident memory (VmHWM) before and after (flat: a follower costs a bounded buffer).
# Prints medians and ratios (target: within 5 %). Usage: scripts/bench-jobs.sh [RUNS] [BYTES]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
bytes=${2:-1073741824}
cargo build --release --quiet
bin=$PWD/target/release/airlock
"$bin" images build minimal --images-dir images >/dev/null

work=$(mktemp -d /dev/shm/airlock-bench-jobs.XXXXXX)
pid=
cleanup() {
  [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
repo=$work/repo
git init -q -b main "$repo"
echo hello > "$repo/README"
git -C "$repo" add -A
git -C "$repo" -c user.name=b -c user.email=b@example.com commit -qm base
token=bench-token
sha=$(printf %s "$token" | sha256sum | cut -d' ' -f1)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat > "$work/airlock.toml" <<EOF
listen = "127.0.0.1:$port"
data_dir = "$work/data"
checkout_filesystem = "directory"
max_concurrent_verifications = 2
[workspaces.bench]
repo = "$repo"
members = { bench = ["view", "verify"] }
[[tokens]]
sha256 = "$sha"
member_id = "bench"
EOF
"$bin" serve --config "$work/airlock.toml" > "$work/serve.out" 2> "$work/serve.log" &
pid=$!
for _ in $(seq 100); do grep -q listening "$work/serve.out" 2>/dev/null && break; sleep 0.1; done
url=http://127.0.0.1:$port/api/v1

call() { # method json -> reply
  curl -sS -H "Authorization: Bearer $token" -H 'Content-Type: application/json' -d "$2" "$url/$1"
}
field() { python3 -c "import json,sys; v=json.load(sys.stdin); print($1)"; }
wait_settled() { # job id -> final job JSON
  while :; do
    j=$(call job.show "{\"workspace_id\":\"bench\",\"job_id\":\"$1\"}")
    s=$(echo "$j" | field 'v["job"]["state"]')
    case $s in queued|running) sleep 0.02 ;; *) echo "$j"; return ;; esac
  done
}
now_ms() { date +%s%3N; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
hwm() { awk '/VmHWM/ {print $2}' "/proc/$pid/status"; }

: > "$work/run.ms"; : > "$work/http.ms"; : > "$work/start.ms"; : > "$work/server.ms"
for i in $(seq "$runs"); do
  t0=$(now_ms)
  "$bin" run --repo "$repo" --rev main --config "$work/airlock.toml" --data-dir "$work/run-data" -- true > /dev/null
  echo $(( $(now_ms) - t0 )) >> "$work/run.ms"
  t0=$(now_ms)
  id=$(call job.submit "{\"workspace_id\":\"bench\",\"revision\":\"main\",\"argv\":[\"true\"],\"idempotency_key\":\"t$i\"}" | field 'v["job"]["job_id"]')
  j=$(wait_settled "$id")
  echo $(( $(now_ms) - t0 )) >> "$work/http.ms"
  echo "$j" | field '__import__("datetime").datetime.fromisoformat(v["job"]["started_at"][:26]).timestamp()*1000 - __import__("datetime").datetime.fromisoformat(v["job"]["queued_at"][:26]).timestamp()*1000' >> "$work/start.ms"
  # The daemon's own clock, submit to settled (the script's polling is not in it).
  echo "$j" | field '__import__("datetime").datetime.fromisoformat(v["job"]["verification"]["finished_at"][:26]).timestamp()*1000 - __import__("datetime").datetime.fromisoformat(v["job"]["queued_at"][:26]).timestamp()*1000' >> "$work/server.ms"
done
run_ms=$(median < "$work/run.ms")
http_ms=$(median < "$work/http.ms")
start_ms=$(median < "$work/start.ms")
server_ms=$(median < "$work/server.ms")
echo "true: airlock run ${run_ms} ms, job.submit to settled over HTTP ${http_ms} ms as the client polls (ratio $(python3 -c "print(f'{$http_ms/$run_ms:.2f}')")x), ${server_ms%.*} ms by the daemon's clock (ratio $(python3 -c "print(f'{$server_ms/$run_ms:.2f}')")x); submit-to-start ${start_ms%.*} ms (median of $runs)"

# 1b. The same job as its client sees it: job.submit, then its log followed to the settle line,
# from one client process (connections and parsing as an orchestrator's, no tool start-up per
# call), against `docker run --rm --network none` of the same image, interleaved (target 0.9x).
python3 - "$port" "$token" "$runs" <<'PY'
import http.client, json, statistics, subprocess, sys, time
port, token, runs = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
auth = {"Authorization": f"Bearer {token}"}
def call(method, body):
    c = http.client.HTTPConnection("127.0.0.1", port)
    c.request("POST", f"/api/v1/{method}", body=json.dumps(body),
              headers={**auth, "Content-Type": "application/json"})
    return json.loads(c.getresponse().read())
def follow(job_id):
    c = http.client.HTTPConnection("127.0.0.1", port)
    c.request("GET", f"/api/v1/jobs/{job_id}/log?follow=1", headers=auth)
    return c.getresponse().read()
docker = ["docker", "run", "--rm", "--network", "none", "airlock/minimal:latest", "true"]
subprocess.run(docker, check=True)
client, raw = [], []
for i in range(runs):
    t0 = time.monotonic()
    job = call("job.submit", {"workspace_id": "bench", "revision": "main", "argv": ["true"],
                              "idempotency_key": f"client-{i}"})["job"]
    log = follow(job["job_id"])
    client.append((time.monotonic() - t0) * 1000)
    assert b"[airlock: job settled: passed]" in log, log
    t0 = time.monotonic()
    subprocess.run(docker, check=True)
    raw.append((time.monotonic() - t0) * 1000)
c, r = statistics.median(client), statistics.median(raw)
print(f"true as the client sees it (job.submit to the settle line of its followed log): "
      f"{c:.0f} ms vs docker run {r:.0f} ms, ratio {c / r:.2f}x (median of {runs}, interleaved)")
PY

script="head -c $bytes /dev/zero | tr '\\\\0' x"
: > "$work/plain.ms"; : > "$work/followed.ms"
hwm0=$(hwm)
for i in $(seq "$runs"); do
  id=$(call job.submit "{\"workspace_id\":\"bench\",\"revision\":\"main\",\"argv\":[\"sh\",\"-c\",\"$script\"],\"timeout_seconds\":1800,\"idempotency_key\":\"p$i\"}" | field 'v["job"]["job_id"]')
  wait_settled "$id" | field 'v["job"]["verification"]["duration_ms"]' >> "$work/plain.ms"
  id=$(call job.submit "{\"workspace_id\":\"bench\",\"revision\":\"main\",\"argv\":[\"sh\",\"-c\",\"sleep 1; $script\"],\"timeout_seconds\":1800,\"idempotency_key\":\"f$i\"}" | field 'v["job"]["job_id"]')
  while [ "$(call job.show "{\"workspace_id\":\"bench\",\"job_id\":\"$id\"}" | field 'v["job"]["state"]')" != running ]; do sleep 0.02; done
  got=$(curl -sS -N -H "Authorization: Bearer $token" "http://127.0.0.1:$port/api/v1/jobs/$id/log?follow=1" | wc -c)
  d=$(wait_settled "$id" | field 'v["job"]["verification"]["duration_ms"]')
  echo $(( d - 1000 )) >> "$work/followed.ms"
  echo "  followed run $i: the follower read $got bytes"
done
hwm1=$(hwm)
plain=$(median < "$work/plain.ms")
followed=$(median < "$work/followed.ms")
echo "$bytes bytes of output: no follower ${plain} ms, one follower ${followed} ms, ratio $(python3 -c "print(f'{$followed/$plain:.3f}')")x; daemon peak RSS ${hwm0} KiB before, ${hwm1} KiB after"
