#!/usr/bin/env bash
# Installs the Debian 12 packages funcd needs, in two sets:
#   runtime   building and running funcd (make run): the compiler, meson,
#             the libraries, and what the runtimes and sources call at run
#             time (node, git)
#   test      also what the tests and benchmarks use (make test, CI): clang
#             for the fuzz targets, wrk, docker-registry, skopeo, ab, sqlite3,
#             nats-server, postgresql (the PostgreSQL drivers' tests start their own
#             server), nginx-light (the cluster tests' load balancer), awscli and
#             python3-boto3 (the S3 gateway's tests drive it with real clients)
# Usage: install-deps.sh [runtime|test] (default: runtime).
# Idempotent: asks apt only for what dpkg says is missing.
set -euo pipefail

set_name=${1:-runtime}
runtime=(
  build-essential meson ninja-build pkg-config
  libevent-dev libh2o-evloop-dev libssl-dev libcjson-dev libyaml-dev libhttp-parser-dev
  libcurl4-openssl-dev libprotobuf-c-dev protobuf-c-compiler libnghttp2-dev
  libmbedtls-dev libsqlite3-dev libgit2-dev libarchive-dev libseccomp-dev libisal-dev zlib1g-dev
  libnats-dev
  libpq-dev
  python3 git util-linux
)
test=(
  clang libclang-rt-14-dev
  curl wrk docker-registry skopeo apache2-utils openssl sqlite3 nats-server
  prometheus
  postgresql
  nginx-light
  awscli python3-boto3
)

case $set_name in
runtime) pkgs=("${runtime[@]}") ;;
test) pkgs=("${runtime[@]}" "${test[@]}") ;;
*) echo "usage: $0 [runtime|test]" >&2; exit 2 ;;
esac

# node runs the node runtime (and, for the tests, the gRPC test client with
# npm); the machine image usually has them (not from Debian), so ask apt
# only when absent.
command -v node >/dev/null 2>&1 || pkgs+=(nodejs)
[ "$set_name" = test ] && { command -v npm >/dev/null 2>&1 || pkgs+=(npm); }

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
