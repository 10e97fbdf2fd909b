#!/usr/bin/env bash
# Installs the Debian 12 packages funcd builds, tests and benchmarks with.
# Idempotent: asks apt only for what dpkg says is missing.
set -euo pipefail

pkgs=(
  build-essential meson ninja-build pkg-config clang libclang-rt-14-dev
  libevent-dev libh2o-evloop-dev libssl-dev libcjson-dev libyaml-dev
  libcurl4-openssl-dev libprotobuf-c-dev protobuf-c-compiler libnghttp2-dev
  libmbedtls-dev libsqlite3-dev libgit2-dev libarchive-dev libseccomp-dev
  curl wrk
  docker-registry skopeo apache2-utils openssl git sqlite3 util-linux
)

# node and npm run the node runtime and the gRPC test client; the machine
# image usually has them (not from Debian), so ask apt only when absent.
command -v node >/dev/null 2>&1 || pkgs+=(nodejs)
command -v npm >/dev/null 2>&1 || pkgs+=(npm)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
