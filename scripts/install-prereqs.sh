#!/usr/bin/env bash
# Installs what Airlock's build, tests and scripts need on a fresh Debian machine that has only the
# Rust toolchain and a running Docker engine: busybox-static (copied into the minimal sandbox
# image), mmdebstrap (builds the toolchain image's root filesystem), git, a C compiler and static
# libc (for the syscall probe fixture), GNU time (peak RSS in the benchmark), e2fsprogs and mount
# (per-job checkout filesystems), python3-pip (real documentation files the tests read), strace
# (the apply durability test).
# Idempotent: installs only what is missing.
set -euo pipefail

need=()
dpkg -s busybox-static >/dev/null 2>&1 || need+=(busybox-static)
command -v git >/dev/null 2>&1 || need+=(git)
command -v cc >/dev/null 2>&1 || need+=(gcc)
[ -f /usr/lib/x86_64-linux-gnu/libc.a ] || [ -f /usr/lib/aarch64-linux-gnu/libc.a ] || need+=(libc6-dev)
[ -x /usr/bin/time ] || need+=(time)
command -v mmdebstrap >/dev/null 2>&1 || need+=(mmdebstrap)
command -v python3 >/dev/null 2>&1 || need+=(python3)
# Real reStructuredText documentation (pip's) for the conflict-marker tests.
dpkg -s python3-pip >/dev/null 2>&1 || need+=(python3-pip)
# Per-job checkout filesystems: mkfs.ext4 and losetup/mount (present on most hosts).
command -v mkfs.ext4 >/dev/null 2>&1 || need+=(e2fsprogs)
command -v losetup >/dev/null 2>&1 || need+=(mount)
# The apply durability test traces the daemon's syscalls.
command -v strace >/dev/null 2>&1 || need+=(strace)

if [ ${#need[@]} -gt 0 ]; then
  # Deduplicate.
  mapfile -t need < <(printf '%s\n' "${need[@]}" | sort -u)
  echo "installing: ${need[*]}" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
  echo "error: no Docker engine is reachable (DOCKER_HOST=${DOCKER_HOST:-unset}); start dockerd first" >&2
  exit 1
fi
