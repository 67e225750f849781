#!/usr/bin/env bash
# Installs what Airlock needs on a fresh Debian machine that has only the Rust toolchain and a
# running Docker engine (apt-get, as root or through sudo, from the machine's configured Debian
# package source). What is installed depends on the job:
#   --for run       the demo and quickstart: busybox-static (copied into the minimal sandbox
#                   image), git, e2fsprogs and mount (per-job checkout filesystems), python3
#                   (the demo's HTTP client)
#   --for governed  the governed demo: the above plus mmdebstrap (builds the git image)
#   (default)       the test suite: all of the above plus a C compiler and static libc (the
#                   syscall probe fixture), GNU time (the benchmark's peak RSS), python3-pip
#                   (real documentation files the tests read), strace (the apply durability test),
#                   python3-venv, chromium and chromium-driver (the web page's browser test), runsc
#                   (gVisor, the runsc isolation level's tests on a second dockerd) and,
#                   from PyPI into target/py, scripts/requirements-tests.txt
# Idempotent: installs only what is missing.
set -euo pipefail

job=tests
if [ "${1:-}" = "--for" ]; then
  job=${2:?--for needs run, governed or tests}
fi
case "$job" in run | governed | tests) ;; *) echo "unknown --for $job (run, governed, tests)" >&2; exit 2 ;; esac

need=()
dpkg -s busybox-static >/dev/null 2>&1 || need+=(busybox-static)
command -v git >/dev/null 2>&1 || need+=(git)
command -v python3 >/dev/null 2>&1 || need+=(python3)
# Per-job checkout filesystems: mkfs.ext4 and losetup/mount (present on most hosts).
command -v mkfs.ext4 >/dev/null 2>&1 || need+=(e2fsprogs)
command -v losetup >/dev/null 2>&1 || need+=(mount)
if [ "$job" != run ]; then
  command -v mmdebstrap >/dev/null 2>&1 || need+=(mmdebstrap)
fi
if [ "$job" = tests ]; then
  command -v cc >/dev/null 2>&1 || need+=(gcc)
  [ -f /usr/lib/x86_64-linux-gnu/libc.a ] || [ -f /usr/lib/aarch64-linux-gnu/libc.a ] || need+=(libc6-dev)
  [ -x /usr/bin/time ] || need+=(time)
  # Real reStructuredText documentation (pip's) for the conflict-marker tests.
  dpkg -s python3-pip >/dev/null 2>&1 || need+=(python3-pip)
  # The apply durability test traces the daemon's syscalls.
  command -v strace >/dev/null 2>&1 || need+=(strace)
  # The Python tools below live in a virtual environment (Debian's python3 has no venv alone).
  python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
  # The web page's real-browser test: headless Chromium driven by Selenium.
  command -v chromium >/dev/null 2>&1 || need+=(chromium)
  command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
  # The remote-engine tests start a second dockerd (the engine's own package has it) reached
  # over mutual TLS with certificates openssl makes.
  command -v openssl >/dev/null 2>&1 || need+=(openssl)
  command -v dockerd >/dev/null 2>&1 || { echo "the remote-engine tests need dockerd on PATH" >&2; exit 1; }
  # The README's quick starts, run as written by the tests, use jq and curl.
  command -v jq >/dev/null 2>&1 || need+=(jq)
  command -v curl >/dev/null 2>&1 || need+=(curl)
  # The isolation-level tests register gVisor's runtime in a second dockerd.
  command -v runsc >/dev/null 2>&1 || need+=(runsc)
fi

if [ ${#need[@]} -gt 0 ]; then
  # Deduplicate.
  mapfile -t need < <(printf '%s\n' "${need[@]}" | sort -u)
  echo "installing: ${need[*]}" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if [ "$job" = tests ]; then
  # The tests' Python tools (scripts/requirements-tests.txt) in target/py, from PyPI; reinstalled
  # only when the requirements change.
  root=$(cd "$(dirname "$0")/.." && pwd)
  venv="$root/target/py"
  want=$(sha256sum "$root/scripts/requirements-tests.txt" | cut -d' ' -f1)
  if [ "$(cat "$venv/.requirements" 2>/dev/null)" != "$want" ]; then
    echo "installing the tests' Python tools into $venv" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$root/scripts/requirements-tests.txt"
    echo "$want" > "$venv/.requirements"
  fi
fi

if ! docker info >/dev/null 2>&1; then
  echo "error: no Docker engine is reachable (DOCKER_HOST=${DOCKER_HOST:-unset}); start dockerd first" >&2
  exit 1
fi
