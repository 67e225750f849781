#!/usr/bin/env bash
# Benchmarks the dependency phase against the raw tools in the same run, on real crates with
# real dependencies from this machine's crate registry (medians of RUNS; reported, never
# asserted):
#   1. cold fetch: a service-sized crate's set (clap, regex, serde, tokio...: about 40 packages)
#      fetched by Airlock (the record's `phases.dependencies_ms`: checkout, set filesystem,
#      sandbox, egress proxy, `cargo vendor`, manifest, publish; a fresh data dir each run)
#      against the same tool on the host, `cargo vendor --locked` into an empty CARGO_HOME,
#      the two interleaved (target <= 1.3x);
#   2. warm staging: the dependency phase of daemon jobs whose set is already there (target
#      <= 50 ms), and of the first job after a start (the set mounted and verified);
#   3. warm job: `cargo test --offline` of a small library (four dependencies) as a daemon job
#      (queued to finished, the daemon's clock) against `docker run` of the same image with
#      the same limits, environment and user, the same set bind-mounted read-only at /deps and
#      a fresh copy of the checkout (target <= 1.1x).
# The registry's hosts are learned at run time from this machine's cargo, through a recording
# proxy, and given to Airlock as its `[egress] allow`; none is written here.
# Usage: scripts/bench-deps.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
cargo build --release --quiet
bin=$PWD/target/release/airlock
"$bin" images build toolchain --images-dir images >/dev/null
image=airlock/toolchain:latest

work=$(mktemp -d /dev/shm/airlock-bench-deps.XXXXXX)
pid=
rec=
cleanup() {
  [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  [ -n "$rec" ] && kill "$rec" 2>/dev/null || true
  # Sets are loop mounts beneath the data dirs: a stopped daemon unmounted its own.
  for m in $(awk -v w="$work" 'index($2, w) == 1 {print $2}' /proc/mounts | sort -r); do
    umount -l "$m" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ratio() { python3 -c "print(f'{$1/$2:.2f}')"; }
now_ms() { date +%s%3N; }

# The recording proxy: tunnels every CONNECT and notes its host:port.
python3 - "$work/proxy.port" "$work/seen" <<'PY' &
import socket, sys, threading
port_file, seen_file = sys.argv[1], sys.argv[2]
seen, lock = set(), threading.Lock()
def pipe(a, b):
    try:
        while (d := a.recv(65536)):
            b.sendall(d)
    except OSError:
        pass
    finally:
        for s in (a, b):
            try: s.shutdown(socket.SHUT_RDWR)
            except OSError: pass
def serve(c):
    f = c.makefile("rb")
    line = f.readline().decode()
    while f.readline() not in (b"\r\n", b"\n", b""):
        pass
    method, target = line.split()[:2]
    if method != "CONNECT":
        c.sendall(b"HTTP/1.1 405 no\r\n\r\n"); c.close(); return
    host, port = target.rsplit(":", 1)
    with lock:
        seen.add(target)
        open(seen_file, "w").write("\n".join(sorted(seen)) + "\n")
    u = socket.create_connection((host, int(port)))
    c.sendall(b"HTTP/1.1 200 ok\r\n\r\n")
    threading.Thread(target=pipe, args=(c, u), daemon=True).start()
    pipe(u, c)
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0)); s.listen(64)
open(port_file, "w").write(str(s.getsockname()[1]))
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
PY
rec=$!
for _ in $(seq 100); do [ -s "$work/proxy.port" ] && break; sleep 0.05; done
proxy=http://127.0.0.1:$(cat "$work/proxy.port")

# The projects: a small library with a few real, widely used dependencies and a test (the job),
# and a service-sized manifest (the cold fetch).
new_crate() { # dir name deps-toml
  mkdir -p "$1/src"
  printf '[package]\nname = "%s"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\n%s\n' "$2" "$3" > "$1/Cargo.toml"
}
repo=$work/repo
new_crate "$repo" bench-deps 'anyhow = "1"
itoa = "1"
memchr = "2"
smallvec = "1"'
cat > "$repo/src/lib.rs" <<'EOF'
pub fn count(hay: &[u8], needle: u8) -> anyhow::Result<String> {
    let n = memchr::memchr_iter(needle, hay).count();
    let v: smallvec::SmallVec<[usize; 4]> = smallvec::smallvec![n];
    Ok(itoa::Buffer::new().format(v[0]).to_string())
}
#[cfg(test)]
mod tests {
    #[test]
    fn counts() {
        assert_eq!(super::count(b"a,b,c", b',').unwrap(), "2");
    }
}
EOF
big=$work/big
new_crate "$big" bench-deps-service 'anyhow = "1"
clap = { version = "4", features = ["derive"] }
regex = "1"
serde = { version = "1", features = ["derive"] }
serde_json = "1"
thiserror = "2"
tokio = { version = "1", features = ["rt", "macros", "time"] }'
echo 'pub fn f() {}' > "$big/src/lib.rs"
for r in "$repo" "$big"; do
  (
    cd "$r"
    export CARGO_HOME=$work/learn-home CARGO_TARGET_DIR=$work/learn-target
    CARGO_HTTP_PROXY=$proxy HTTPS_PROXY=$proxy cargo generate-lockfile --quiet
    CARGO_HTTP_PROXY=$proxy HTTPS_PROXY=$proxy cargo fetch --locked --quiet
  )
  git -C "$r" init -q -b main
  git -C "$r" add -A
  git -C "$r" -c user.name=b -c user.email=b@example.com commit -qm base
done
[ -s "$work/seen" ] || { echo "bench failed: the host's cargo reached no registry through the recorder" >&2; exit 1; }
allow=$(python3 -c "import sys; print(', '.join('\"%s\"' % l.strip() for l in open(sys.argv[1]) if l.strip()))" "$work/seen")
trust=
bundle=${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}
[ -f "$bundle" ] && trust="ca_bundle = \"$bundle\""
echo "projects: $(grep -c '^name = ' "$big/Cargo.lock") packages (cold fetch), $(grep -c '^name = ' "$repo/Cargo.lock") (job); egress learned from the host's cargo: $(tr '\n' ' ' < "$work/seen")"

token=bench-token
sha=$(printf %s "$token" | sha256sum | cut -d' ' -f1)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
config() { # data dir -> config file
  cat > "$work/airlock.toml" <<EOF
listen = "127.0.0.1:$port"
data_dir = "$1"
max_concurrent_verifications = 1
[egress]
allow = [$allow]
[dependencies]
$trust
[profiles.rust]
image = "$image"
dependencies = ["cargo"]
cpus = 2
memory_bytes = 2147483648
tmp_bytes = 1073741824
pids = 1024
[workspaces.bench]
repo = "$repo"
profile = "rust"
members = { bench = ["view", "verify"] }
[[tokens]]
sha256 = "$sha"
member_id = "bench"
EOF
}
field() { python3 -c "import json,sys; v=json.load(sys.stdin); print($1)"; }

# 1. Cold fetch, the two sides taking turns at going first (a registry's own caches warm up).
cold_airlock() {
  config "$work/cold-$1"
  out=$("$bin" run --repo "$big" --rev main --config "$work/airlock.toml" --data-dir "$work/cold-$1" --profile rust -- true)
  echo "$out" | field 'v["phases"]["dependencies"]' | grep -qx fetched || { echo "bench failed: run $1: $out" >&2; exit 1; }
  echo "$out" | field 'v["phases"]["dependencies_ms"]' >> "$work/cold-airlock.ms"
  rm -rf "$work/cold-$1"
}
cold_host() {
  local home
  home=$(mktemp -d "$work/host-home.XXXXXX")
  t0=$(now_ms)
  (cd "$big" && CARGO_HOME=$home cargo vendor --locked --versioned-dirs --quiet "$home/vendor" >/dev/null)
  echo $(( $(now_ms) - t0 )) >> "$work/cold-host.ms"
  rm -rf "$home"
}
# The same tool in a plain container of the same image, as the same (non-root) user, on the
# host's network: what any container on this engine costs the tool, Airlock's own part apart.
cold_container() {
  local ca=()
  [ -f "$bundle" ] && ca=(-v "$bundle:/airlock-ca.pem:ro" -e CARGO_HTTP_CAINFO=/airlock-ca.pem)
  t0=$(now_ms)
  docker run --rm --network host --user 65532:65532 --read-only --tmpfs /tmp:rw,exec,size=1g \
    --cpus 2 --memory 2g -v "$big:/src:ro" -w /src -e HOME=/tmp -e CARGO_HOME=/tmp/home \
    -e PATH=/opt/rust/bin:/usr/bin:/bin "${ca[@]}" "$image" \
    cargo vendor --locked --versioned-dirs --quiet /tmp/vendor >/dev/null
  echo $(( $(now_ms) - t0 )) >> "$work/cold-container.ms"
}
: > "$work/cold-airlock.ms"; : > "$work/cold-host.ms"; : > "$work/cold-container.ms"
for i in $(seq "$runs"); do
  if [ $((i % 2)) = 1 ]; then cold_airlock "$i"; cold_host; cold_container; else cold_container; cold_host; cold_airlock "$i"; fi
done
ca=$(median < "$work/cold-airlock.ms")
ch=$(median < "$work/cold-host.ms")
cc=$(median < "$work/cold-container.ms")
echo "cold fetch: airlock ${ca} ms vs cargo vendor on the host ${ch} ms, ratio $(ratio "$ca" "$ch")x (target <= 1.3), median of $runs"
echo "  the same cargo vendor in a plain docker run of the same image as the same user: ${cc} ms; airlock against it $(ratio "$ca" "$cc")x"

# 2 and 3: a daemon whose set is fetched by its first job.
data=$work/data
config "$data"
"$bin" serve --config "$work/airlock.toml" > "$work/serve.out" 2> "$work/serve.log" &
pid=$!
for _ in $(seq 300); do grep -q listening "$work/serve.out" 2>/dev/null && break; sleep 0.1; done
grep -q listening "$work/serve.out" || { echo "bench failed: airlock serve did not start" >&2; cat "$work/serve.log" >&2; exit 1; }
url=http://127.0.0.1:$port/api/v1
call() { curl -sS -H "Authorization: Bearer $token" -H 'Content-Type: application/json' -d "$2" "$url/$1"; }
job() { # key argv-json -> settled job JSON
  local id j s
  id=$(call job.submit "{\"workspace_id\":\"bench\",\"revision\":\"main\",\"argv\":$2,\"timeout_seconds\":1800,\"idempotency_key\":\"$1\"}" | field 'v["job"]["job_id"]')
  # Waits by following the job's log to its end: polling would take CPU from the job.
  curl -sS -N -o /dev/null -H "Authorization: Bearer $token" "http://127.0.0.1:$port/api/v1/jobs/$id/log?follow=1"
  while :; do
    j=$(call job.show "{\"workspace_id\":\"bench\",\"job_id\":\"$id\"}")
    s=$(echo "$j" | field 'v["job"]["state"]')
    case $s in queued|running) sleep 0.05 ;; *) echo "$j"; return ;; esac
  done
}
first=$(job fetch '["env"]')
echo "$first" | field 'v["job"]["state"]' | grep -qx passed || { echo "bench failed: $first" >&2; exit 1; }
echo "$first" | field 'v["job"]["verification"]["output"]' | grep -Ev '^(HOSTNAME|PWD|SHLVL|_)=' | grep . > "$work/job.env"
# Restarted: the next job's set is mounted and verified first (once per process).
kill -TERM "$pid"; wait "$pid" || true
"$bin" serve --config "$work/airlock.toml" > "$work/serve.out" 2> "$work/serve.log" &
pid=$!
for _ in $(seq 300); do grep -q listening "$work/serve.out" 2>/dev/null && break; sleep 0.1; done
after_start=$(job restart '["true"]' | field 'v["job"]["verification"]["phases"]["dependencies_ms"]')
: > "$work/warm.ms"
for i in $(seq "$runs"); do
  j=$(job "warm-$i" '["true"]')
  echo "$j" | field 'v["job"]["verification"]["phases"]["dependencies"]' | grep -qx cached || { echo "bench failed: $j" >&2; exit 1; }
  echo "$j" | field 'v["job"]["verification"]["phases"]["dependencies_ms"]' >> "$work/warm.ms"
done
echo "warm staging: the dependency phase of a job whose set is there: median $(median < "$work/warm.ms") ms (target <= 50), first job after a start (mount and verify) ${after_start} ms, median of $runs"

# 3. A warm job against docker run with the same set.
set_dir=$(ls -d "$data"/deps/mnt/* | head -1)
user=$(docker image inspect -f '{{.Config.User}}' "$image")
envs=()
while IFS= read -r l; do envs+=(-e "$l"); done < "$work/job.env"
: > "$work/job-airlock.ms"; : > "$work/job-docker.ms"; : > "$work/jobs.jsonl"
ts() { python3 -c "import datetime,sys; print(int(datetime.datetime.fromisoformat(sys.argv[1][:26]).timestamp()*1000))" "$1"; }
for i in $(seq "$runs"); do
  j=$(job "test-$i" '["cargo","test","--offline"]')
  echo "$j" | field 'v["job"]["state"]' | grep -qx passed || { echo "bench failed: $j" >&2; exit 1; }
  q=$(echo "$j" | field 'v["job"]["queued_at"]')
  f=$(echo "$j" | field 'v["job"]["verification"]["finished_at"]')
  echo $(( $(ts "$f") - $(ts "$q") )) >> "$work/job-airlock.ms"
  echo "$j" >> "$work/jobs.jsonl"
  co=$work/co-$i
  mkdir -p "$co"
  git -C "$repo" archive main | tar -x -C "$co"
  chown -R 65532:65532 "$co"
  t0=$(now_ms)
  docker run --rm --network none --user 65532:65532 --read-only --tmpfs /tmp:rw,exec,size=1g \
    --cpus 2 --memory 2g --pids-limit 1024 --cap-drop ALL --security-opt no-new-privileges \
    -w /workspace -v "$co:/workspace" -v "$set_dir:/deps:ro" "${envs[@]}" \
    "$image" cargo test --offline > "$work/docker-$i.out" 2>&1 || { echo "bench failed: docker run:" >&2; cat "$work/docker-$i.out" >&2; exit 1; }
  echo $(( $(now_ms) - t0 )) >> "$work/job-docker.ms"
  rm -rf "$co"
done
ja=$(median < "$work/job-airlock.ms")
jd=$(median < "$work/job-docker.ms")
echo "warm job (cargo test --offline): airlock ${ja} ms (queued to finished) vs docker run with the set bind-mounted ${jd} ms, ratio $(ratio "$ja" "$jd")x (target <= 1.1), median of $runs (image user ${user:-root}, run as 65532)"
python3 - "$work/jobs.jsonl" <<'PY'
import datetime, json, statistics, sys
def t(s): return datetime.datetime.fromisoformat(s[:26]).timestamp() * 1000
rows = [json.loads(l)["job"] for l in open(sys.argv[1])]
def med(f): return statistics.median(f(r) for r in rows)
v = lambda r: r["verification"]
parts = {
    "queued->started": med(lambda r: t(r["started_at"]) - t(r["queued_at"])),
    "started->recorded": med(lambda r: t(v(r)["created_at"]) - t(r["started_at"])),
}
for k in ["dependencies_ms", "stage_ms", "create_ms", "start_ms", "run_ms", "destroy_ms", "check_ms"]:
    parts[k] = med(lambda r: v(r)["phases"].get(k) or 0)
parts["recorded->finished"] = med(lambda r: t(v(r)["finished_at"]) - t(v(r)["created_at"]))
print("  where airlock's job time goes (medians, ms): " + ", ".join(f"{k} {x:.0f}" for k, x in parts.items()))
PY
