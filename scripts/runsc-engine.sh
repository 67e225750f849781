#!/usr/bin/env bash
# A dockerd of the tests' own with gVisor's runsc registered, beside the machine's engine: its
# own data root, exec root, pidfile, containerd namespaces and config file, no bridge and no
# iptables, reached on a unix socket under DIR. The test script runs the runner, hardening and
# recovery tests a third time against it (DOCKER_HOST) with every profile under runsc.
#
#   scripts/runsc-engine.sh start DIR   starts it, loads the sandbox images the tests use from
#                                       the machine's engine (ids kept), prints DOCKER_HOST=...
#   scripts/runsc-engine.sh stop DIR    stops it and removes DIR
#
# RUNSC_ARGS (a JSON list's items, default "--network=none") replaces runsc's arguments: a test
# registers it without --network=none to make it refuse to start a sandbox.
#
# runsc is registered with --network=none, as docs/security.md tells operators to: without it runsc
# refuses to start a container in the host's network namespace, and each refused start leaves
# sandbox processes behind. Not with --oci-seccomp: this runsc then answers EPERM where the
# job's profile says ENOSYS (clone3 among them), so no thread can start.
set -euo pipefail

cmd=${1:?usage: runsc-engine.sh start|stop DIR}
dir=${2:?usage: runsc-engine.sh start|stop DIR}
images=(airlock/minimal:latest)

case "$cmd" in
start)
  command -v runsc >/dev/null || { echo "runsc is not installed (scripts/install-prereqs.sh)" >&2; exit 1; }
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  args=${RUNSC_ARGS-'"--network=none"'}
  cat > "$dir/daemon.json" <<EOF
{"runtimes": {"runsc": {"path": "$(command -v runsc)", "runtimeArgs": [$args]}}}
EOF
  ns="airlock-runsc-$$"
  dockerd --data-root "$dir/data" --exec-root "$dir/exec" --pidfile "$dir/docker.pid" \
    --config-file "$dir/daemon.json" --containerd-namespace "$ns" \
    --containerd-plugins-namespace "$ns-plugins" --bridge=none --iptables=false --ip-masq=false \
    -H "unix://$dir/docker.sock" > "$dir/dockerd.log" 2>&1 &
  for _ in $(seq 1 120); do
    docker -H "unix://$dir/docker.sock" version >/dev/null 2>&1 && break
    sleep 0.5
  done
  docker -H "unix://$dir/docker.sock" info --format '{{json .Runtimes}}' | grep -q '"runsc"' || {
    cat "$dir/dockerd.log" >&2
    echo "the runsc engine did not come up with runsc registered (log above)" >&2
    exit 1
  }
  for image in "${images[@]}"; do
    docker save "$image" | docker -H "unix://$dir/docker.sock" load -q >/dev/null
  done
  echo "DOCKER_HOST=unix://$dir/docker.sock"
  ;;
stop)
  [ -d "$dir" ] || exit 0
  if [ -f "$dir/docker.pid" ]; then
    pid=$(cat "$dir/docker.pid")
    docker -H "unix://$dir/docker.sock" ps -aq 2>/dev/null | xargs -r docker -H "unix://$dir/docker.sock" rm -f >/dev/null 2>&1 || true
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  fi
  # Mounts the engine left (its overlay layers, its exec root's namespaces) go before the tree.
  grep " $dir/" /proc/mounts | awk '{print $2}' | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  rm -rf "$dir"
  ;;
*)
  echo "usage: runsc-engine.sh start|stop DIR" >&2
  exit 2
  ;;
esac
