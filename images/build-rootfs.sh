#!/usr/bin/env bash
# Builds a Debian root filesystem image (toolchain, git) as a tar at $AIRLOCK_ROOTFS_TAR. Image
# directories name it in their image.toml (`script = "../build-rootfs.sh"`); `airlock images
# build` runs it with AIRLOCK_IMAGE_DIR set to the image's directory.
#
# - Debian release: the host's own (VERSION_CODENAME in /etc/os-release).
# - Package source: the apt sources configured on this machine, read now (no mirror host name is
#   written anywhere in the repository). Override with AIRLOCK_APT_SOURCES="file1 file2".
# - Packages: packages.txt in $AIRLOCK_IMAGE_DIR.
# - Sandbox user: uid/gid 65532 ("sandbox"), home /tmp.
# - Rust: when AIRLOCK_RUST_SYSROOT is set, that toolchain's bin/ and lib/ are copied read-only
#   to /opt/rust (docs and sources left out), so `cargo test --offline` works in the sandbox.
set -euo pipefail
here=${AIRLOCK_IMAGE_DIR:?AIRLOCK_IMAGE_DIR must name the image directory}
name=$(basename "$here")
out=${AIRLOCK_ROOTFS_TAR:?AIRLOCK_ROOTFS_TAR must name the output tar}
rust=${AIRLOCK_RUST_SYSROOT:-}

if ! command -v mmdebstrap >/dev/null 2>&1; then
  echo "mmdebstrap is not installed: apt-get install mmdebstrap" >&2
  exit 3
fi
. /etc/os-release
suite=${VERSION_CODENAME:?the host /etc/os-release has no VERSION_CODENAME}

sources=()
if [ -n "${AIRLOCK_APT_SOURCES:-}" ]; then
  read -r -a sources <<< "$AIRLOCK_APT_SOURCES"
else
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -s "$f" ] && grep -qv '^\s*#' "$f" && sources+=("$f")
  done
fi
if [ ${#sources[@]} -eq 0 ]; then
  echo "no apt sources are configured on this machine (/etc/apt/sources.list, /etc/apt/sources.list.d/)" >&2
  exit 3
fi
packages=$(grep -v '^\s*#' "$here/packages.txt" | grep -v '^\s*$' | paste -sd, -)
echo "$name rootfs: Debian $suite, packages $packages, sources ${sources[*]}, rust ${rust:-none}" >&2

hooks=(
  --customize-hook='chroot "$1" groupadd --gid 65532 sandbox'
  --customize-hook='chroot "$1" useradd --uid 65532 --gid 65532 --home-dir /tmp --no-create-home --shell /bin/sh sandbox'
  --customize-hook='mkdir -p "$1/workspace" && chown 65532:65532 "$1/workspace" && chmod 1777 "$1/tmp"'
)
if [ -n "$rust" ]; then
  [ -x "$rust/bin/cargo" ] && [ -x "$rust/bin/rustc" ] || { echo "AIRLOCK_RUST_SYSROOT=$rust has no bin/cargo and bin/rustc" >&2; exit 3; }
  hooks+=(--customize-hook="mkdir -p \"\$1/opt/rust\" && cp -a '$rust/bin' '$rust/lib' \"\$1/opt/rust/\" && rm -rf \"\$1/opt/rust/lib/rustlib/src\" && chmod -R a+rX,a-w \"\$1/opt/rust\"")
fi

set +e
mmdebstrap --variant=minbase --mode=root --format=tar \
  --include="$packages" \
  --aptopt='Acquire::Retries "3"' \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' \
  "${hooks[@]}" \
  "$suite" "$out" "${sources[@]}"
rc=$?
set -e
if [ $rc -ne 0 ]; then
  echo "building the $name rootfs failed (mmdebstrap exit $rc): check that the package source(s) ${sources[*]} can be reached from this machine" >&2
  exit $rc
fi
