#!/usr/bin/env bash
# Benchmarks a job on a remote engine (a second dockerd reached over mutual TLS on loopback,
# started here) against the raw tool doing the same work in the same run:
#   1. `airlock run -- true` vs the docker CLI doing what Airlock does for it: a tmpfs volume
#      with the quota, a holder container keeping it mounted, the tree uploaded with
#      `tar | docker cp`, the hardened job container, the tree read back, everything removed.
#   2. the same with a tree of FILES files (default 50000): staging + read-back cost.
# Prints medians and the ratios (targets: <= 1.1x and <= 1.0x), and where Airlock's time went
# (its steps on the engine as it logs them at debug level, target airlock::steps: reaching the
# engine, the volume, the holder, packing, the upload, the job's phases, the read-back, the
# removal; "process" is the rest: start-up, image checks, the database, the artifact). Usage:
#   scripts/bench-engines.sh [RUNS] [FILES]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-7}
files=${2:-50000}
cargo build --release --quiet
bin=$PWD/target/release/airlock
"$bin" images build minimal --images-dir images >/dev/null

work=$(mktemp -d /dev/shm/airlock-bench-engines.XXXXXX)
cleanup() {
  [ -f "$work/dockerd.pid.child" ] && kill -TERM "$(cat "$work/dockerd.pid.child")" 2>/dev/null || true
  sleep 2
  grep " $work" /proc/self/mountinfo | awk '{print $5}' | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
certs=$work/certs
mkdir -p "$certs"
(
  cd "$certs"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 1 -subj /CN=bench-ca 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > server.ext
  printf 'extendedKeyUsage=clientAuth\n' > client.ext
  for who in server client; do
    openssl req -newkey rsa:2048 -nodes -keyout $who.key -out $who.csr -subj /CN=bench-$who 2>/dev/null
    openssl x509 -req -in $who.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out $who.pem -days 1 -extfile $who.ext 2>/dev/null
  done
)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
echo '{}' > "$work/daemon.json"
# The engine's data root on the machine's disk (overlay upper dirs cannot live on tmpfs here).
data=$(mktemp -d /var/tmp/airlock-bench-engine-data.XXXXXX)
trap 'cleanup; rm -rf "$data" "$data-airlock"' EXIT
dockerd --data-root "$data" --exec-root "$work/exec" --pidfile "$work/dockerd.pid" \
  --config-file "$work/daemon.json" --containerd-namespace "bench-$port" \
  --containerd-plugins-namespace "bench-$port-plugins" --bridge=none --iptables=false --ip-masq=false \
  -H "tcp://127.0.0.1:$port" --tlsverify --tlscacert "$certs/ca.pem" \
  --tlscert "$certs/server.pem" --tlskey "$certs/server.key" > "$work/dockerd.log" 2>&1 &
echo $! > "$work/dockerd.pid.child"
d2() { docker -H "tcp://127.0.0.1:$port" --tlsverify --tlscacert "$certs/ca.pem" \
  --tlscert "$certs/client.pem" --tlskey "$certs/client.key" "$@"; }
for _ in $(seq 100); do d2 version >/dev/null 2>&1 && break; sleep 0.2; done
docker save airlock/minimal:latest | d2 load -q >/dev/null

cat > "$work/airlock.toml" <<EOF
[[engines]]
name = "remote"
host = "tcp://127.0.0.1:$port"
max_jobs = 1
tls = { ca = "$certs/ca.pem", cert = "$certs/client.pem", key = "$certs/client.key" }
EOF
seccomp=$work/seccomp.json
python3 -c 'import json,sys; print(json.dumps(json.load(open("seccomp/airlock.json")),separators=(",",":")))' > "$seccomp"

make_repo() { # DIR NFILES
  mkdir -p "$1"; git -C "$1" init -q -b main
  python3 - "$1" "$2" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = os.path.join(root, "src", f"d{i // 500:03d}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i:05d}.txt"), "w") as f:
        f.write(f"file {i}\n")
PY
  git -C "$1" add -A
  git -C "$1" -c user.name=b -c user.email=b@example.com commit -qm tree
}

# What Airlock does for one job on the engine, with the docker CLI (one volume, one holder,
# one upload, one hardened job container, one read-back).
raw_job() { # REPO NAME
  local repo=$1 name=$2
  d2 volume create --driver local --opt type=tmpfs --opt device=tmpfs \
    --opt "o=size=4294967296,nr_inodes=1000000,uid=65532,gid=65532,mode=0755" "$name" >/dev/null
  d2 run -d --name "hold-$name" --network none --read-only --cap-drop ALL \
    --security-opt no-new-privileges --security-opt "seccomp=$seccomp" --user 65532:65532 \
    --pids-limit 8 --memory 32m -v "$name:/w" airlock/minimal:latest sleep 2147483647 >/dev/null
  git -C "$repo" archive --format=tar HEAD | d2 cp - "hold-$name:/w"
  d2 run --rm --network none --read-only --cap-drop ALL --security-opt no-new-privileges \
    --security-opt "seccomp=$seccomp" --user 65532:65532 --pids-limit 256 --memory 1g \
    --memory-swap 1g --cpus 1 --tmpfs /tmp:rw,exec,nosuid,nodev,size=268435456 --init \
    -v "$name:/workspace" -w /workspace airlock/minimal:latest true
  d2 cp "hold-$name:/w" - > /dev/null
  d2 rm -f "hold-$name" >/dev/null
  d2 volume rm "$name" >/dev/null
}

ms() { python3 -c 'import time; print(int(time.time()*1000))'; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

bench() { # LABEL SLUG REPO (SLUG names the raw run's volumes: [a-zA-Z0-9_.-] only)
  local label=$1 slug=$2 repo=$3 a=() r=()
  : > "$work/$slug.steps"
  for i in $(seq "$runs"); do
    t0=$(ms)
    AIRLOCK_LOG=info,airlock::steps=debug "$bin" run --config "$work/airlock.toml" --data-dir "$data-airlock" \
      --repo "$repo" --rev main -- true > "$work/$slug.json" 2> "$work/$slug.log"
    t1=$(ms)
    raw_job "$repo" "bench-$slug-$i"; t2=$(ms)
    a+=($((t1 - t0))); r+=($((t2 - t1)))
    python3 - "$work/$slug.json" "$work/$slug.log" $((t1 - t0)) >> "$work/$slug.steps" <<'PY'
import json, re, sys
# One run's phases in milliseconds, as Airlock logged them: its steps on the engine and the
# job's phases from the record; "process" is what is left of the wall time (start-up, the
# database, the artifact, exit).
phases = json.load(open(sys.argv[1]))["phases"]
steps = {}
for line in open(sys.argv[2]):
    m = re.search(r'op="([^"]+)".*steps=(.*)$', line)
    if m:
        for kv in m.group(2).split():
            k, us = kv.split("=")
            steps[f"{m.group(1)}: {k}"] = steps.get(f"{m.group(1)}: {k}", 0) + int(us) / 1000
for k in ("create_ms", "start_ms", "run_ms", "destroy_ms"):
    steps[f"job: {k[:-3]}"] = phases[k]
steps["process"] = int(sys.argv[3]) - sum(steps.values())
print(json.dumps(steps))
PY
  done
  am=$(printf '%s\n' "${a[@]}" | median); rm_=$(printf '%s\n' "${r[@]}" | median)
  python3 -c "print(f'$label: airlock run {$am} ms, docker CLI {$rm_} ms, ratio {$am/$rm_:.2f}x')"
  python3 - "$work/$slug.steps" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
print("  phases, medians in ms: " + ", ".join(
    f"{k} {statistics.median(r.get(k, 0) for r in runs):.1f}" for k in runs[-1]))
PY
}

make_repo "$work/small" 3
bench "true, 3 files" small "$work/small"
make_repo "$work/big" "$files"
bench "true, $files files" big "$work/big"
