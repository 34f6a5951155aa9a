#!/usr/bin/env bash
# Installs the system packages Cairn's build needs, when they are missing.
#
#   clang, libclang-dev  bindgen (librocksdb-sys) needs libclang
#   g++, make            RocksDB's C++ sources
#   cmake                FAISS (cairn-faiss) builds with cmake (≥ 3.24)
#   libopenblas-dev      BLAS for FAISS (k-means, exact scans, codec training)
#   liblapack-dev        LAPACK for FAISS (OPQ's rotation); OpenMP comes with g++ (libgomp)
#   pkg-config           -sys crates probing for system libraries
#   python3-venv         the Qdrant-client compatibility test makes a virtualenv
#
# Idempotent and quick when everything is present. Uses apt-get (Debian/Ubuntu), with sudo
# when not root. The Rust toolchain itself comes from rustup (https://rustup.rs).
set -euo pipefail

need=()
have_cmd() { command -v "$1" >/dev/null 2>&1; }
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

have_cmd clang || need+=(clang)
have_pkg libclang-dev || ls /usr/lib/llvm-*/lib/libclang.so* >/dev/null 2>&1 || need+=(libclang-dev)
have_cmd g++ || need+=(g++)
have_cmd make || need+=(make)
have_cmd cmake || need+=(cmake)
have_cmd pkg-config || need+=(pkg-config)
have_pkg libopenblas-dev || need+=(libopenblas-dev)
have_pkg liblapack-dev || need+=(liblapack-dev)
python3 -c "import venv, ensurepip" >/dev/null 2>&1 || need+=(python3-venv)

if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  if ! have_cmd apt-get; then
    echo "setup: please install: ${need[*]} (no apt-get on this machine)" >&2
    exit 1
  fi
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if ! have_cmd cargo; then
  echo "setup: cargo not found; install Rust with rustup (https://rustup.rs), then re-run" >&2
  exit 1
fi
