#!/usr/bin/env bash
# Pool throughput: does a pool of two engines finish a farm's queue faster than one?
# Starts two engines (dockerd on loopback TCP, each with its own data root), then runs one
# `airlock serve` on engine A alone and one on engines A and B, each engine with the same
# MAX_JOBS slots, and queues JOBS jobs on each (half from workspace `a`, then half from
# workspace `b`, all queued before the first starts):
#   1. `sleep 1`;
#   2. a CPU-light real command (reads the checkout and hashes a binary of the image).
# Reports jobs per minute (from the first job queued to the last settled, the server's own
# timestamps) and the ratio two engines / one (target >= 1.8), how busy this machine's CPUs
# were (both engines run here and share them, which a farm's engines would not), and checks the fair
# per-workspace order: once every job is queued, jobs start alternating between the
# workspaces although every `a` job was queued first (the largest lead of one workspace over
# the other in start order is printed; round robin keeps it at 1). Usage:
#   scripts/bench-pool.sh [JOBS] [MAX_JOBS]
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${1:-40}
slots=${2:-2}
cargo build --release --quiet
bin=$PWD/target/release/airlock
"$bin" images build minimal --images-dir images >/dev/null

work=$(mktemp -d /dev/shm/airlock-bench-pool.XXXXXX)
# Engines' data roots on the machine's disk (overlay upper dirs cannot live on tmpfs here).
data=$(mktemp -d /var/tmp/airlock-bench-pool.XXXXXX)
serve_pid=
cleanup() {
  [ -n "$serve_pid" ] && kill -TERM "$serve_pid" 2>/dev/null && wait "$serve_pid" 2>/dev/null || true
  for p in "$work"/dockerd-*.pid.child; do
    [ -f "$p" ] && kill -TERM "$(cat "$p")" 2>/dev/null || true
  done
  sleep 2
  grep -E " ($work|$data)" /proc/self/mountinfo | awk '{print $5}' | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  rm -rf "$work" "$data"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

declare -A engine_port
for e in a b; do
  port=$(free_port)
  engine_port[$e]=$port
  echo '{}' > "$work/dockerd-$e.json"
  dockerd --data-root "$data/engine-$e" --exec-root "$work/exec-$e" --pidfile "$work/dockerd-$e.pid" \
    --config-file "$work/dockerd-$e.json" --containerd-namespace "benchpool-$port" \
    --containerd-plugins-namespace "benchpool-$port-plugins" --bridge=none --iptables=false \
    --ip-masq=false -H "tcp://127.0.0.1:$port" > "$work/dockerd-$e.log" 2>&1 &
  echo $! > "$work/dockerd-$e.pid.child"
done
for e in a b; do
  h=tcp://127.0.0.1:${engine_port[$e]}
  for _ in $(seq 150); do docker -H "$h" version >/dev/null 2>&1 && break; sleep 0.2; done
  docker save airlock/minimal:latest | docker -H "$h" load -q >/dev/null
done

repo=$work/repo
git init -q -b main "$repo"
echo hello > "$repo/README"
git -C "$repo" add -A
git -C "$repo" -c user.name=b -c user.email=b@example.com commit -qm base
token=bench-token
sha=$(printf %s "$token" | sha256sum | cut -d' ' -f1)

config() { # FILE PORT ENGINES...
  local file=$1 port=$2
  shift 2
  {
    echo "listen = \"127.0.0.1:$port\""
    echo "data_dir = \"$file.data\""
    # As many jobs start as the engines have slots: a job's start (its slot in the fair queue)
    # is then its placement, and the start order is the fair queue's order.
    echo "max_concurrent_verifications = $((slots * $#))"
    for ws in a b; do
      echo "[workspaces.$ws]"
      echo "repo = \"$repo\""
      echo "max_running_jobs = $((2 * slots))"
      echo "max_queued_jobs = $jobs"
      echo "members = { bench = [\"view\", \"verify\"] }"
    done
    echo '[[tokens]]'
    echo "sha256 = \"$sha\""
    echo 'member_id = "bench"'
    for e in "$@"; do
      echo '[[engines]]'
      echo "name = \"$e\""
      echo "host = \"tcp://127.0.0.1:${engine_port[$e]}\""
      echo "max_jobs = $slots"
      echo 'insecure_plaintext = true'
    done
  } > "$file"
}

# One queue of JOBS jobs running ARGV (JSON) on ENGINES; writes "<jobs per minute> <largest lead>
# <engines used>" to $work/LABEL.result.
queue() { # LABEL ARGV_JSON ENGINES...
  local label=$1 argv=$2
  shift 2
  local port url
  port=$(free_port)
  url=http://127.0.0.1:$port/api/v1
  config "$work/$label.toml" "$port" "$@"
  "$bin" serve --config "$work/$label.toml" > "$work/$label.out" 2> "$work/$label.log" &
  serve_pid=$!
  for _ in $(seq 200); do grep -q listening "$work/$label.out" 2>/dev/null && break; sleep 0.1; done
  call() { curl -sS -H "Authorization: Bearer $token" -H 'Content-Type: application/json' -d "$2" "$url/$1"; }
  # A warm-up job per engine (images checked, workspaces' first use), not counted.
  for i in $(seq "$#"); do
    call job.submit "{\"workspace_id\":\"a\",\"revision\":\"main\",\"argv\":[\"true\"],\"idempotency_key\":\"warm-$i\",\"labels\":[\"warm\"]}" >/dev/null
  done
  while call job.list '{"workspace_id":"a","limit":100}' | jq -e '[.jobs[] | select(.state == "queued" or .state == "running")] | length > 0' >/dev/null; do sleep 0.1; done
  local cpu0
  cpu0=$(head -1 /proc/stat)
  for ws in a b; do
    for i in $(seq $((jobs / 2))); do
      call job.submit "{\"workspace_id\":\"$ws\",\"revision\":\"main\",\"argv\":$argv,\"idempotency_key\":\"$label-$ws-$i\",\"labels\":[\"bench\"]}" >/dev/null
    done
  done
  local all
  while :; do
    all=$(for ws in a b; do call job.list "{\"workspace_id\":\"$ws\",\"labels\":[\"bench\"],\"limit\":100}"; done | jq -s '[.[].jobs[]]')
    [ "$(echo "$all" | jq '[.[] | select(.state == "queued" or .state == "running")] | length')" = 0 ] && break
    sleep 0.2
  done
  local busy
  busy=$(python3 -c '
import sys
a, b = ([int(x) for x in l.split()[1:]] for l in sys.argv[1:])
d = [y - x for x, y in zip(a, b)]
print(100 * (1 - (d[3] + d[4]) / sum(d)))' "$cpu0" "$(head -1 /proc/stat)")
  kill -TERM "$serve_pid"; wait "$serve_pid" 2>/dev/null || true; serve_pid=
  echo "$all" > "$work/$label.jobs.json"
  python3 - "$work/$label.jobs.json" "$jobs" "$busy" > "$work/$label.result" <<'PY'
import json, sys, datetime
jobs = json.load(open(sys.argv[1]))
want = int(sys.argv[2])
def t(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")[:26] + "+00:00")
passed = [j for j in jobs if j["verification"]["status"] == "passed"]
if len(jobs) != want or len(passed) != want:
    sys.exit(f"{len(passed)} of {len(jobs)} jobs passed, {want} queued")
first = min(t(j["queued_at"]) for j in jobs)
last = max(t(j["verification"]["finished_at"]) for j in jobs)
per_minute = len(jobs) / (last - first).total_seconds() * 60
# Fairness among the jobs that started once every job was queued: the round robin alternates
# them between the workspaces although every `a` job was queued first.
all_queued = max(t(j["queued_at"]) for j in jobs)
lead, worst = 0, 0
for j in sorted(jobs, key=lambda j: t(j["started_at"])):
    if t(j["started_at"]) < all_queued:
        continue
    lead += 1 if j["workspace_id"] == "a" else -1
    worst = max(worst, abs(lead))
engines = sorted({j["verification"]["engine"] for j in jobs})
busy = float(sys.argv[3])
print(f"{per_minute:.1f} {worst} {','.join(engines)} {busy:.0f}")
PY
}

echo "$jobs jobs (half per workspace), $slots slots per engine"
for what in sleep light; do
  case $what in
    sleep) argv='["sleep","1"]' ;;
    light) argv='["sh","-c","cat README >/dev/null && sha256sum /bin/busybox >/dev/null"]' ;;
  esac
  queue "$what-one" "$argv" a
  queue "$what-two" "$argv" a b
  read -r one lead1 used1 busy1 < "$work/$what-one.result"
  read -r two lead2 used2 busy2 < "$work/$what-two.result"
  python3 -c "print(f'$what: one engine ($used1) {$one} jobs/min, two engines ($used2) {$two} jobs/min, ratio {$two/$one:.2f}x (target >= 1.8); this machine\'s CPUs busy {$busy1}% and {$busy2}% (both engines run on them); largest lead of one workspace in start order once all were queued: {$lead1} and {$lead2}')"
done
