#!/bin/sh
# Builds OCI image layouts for the registry tests and bench/pull.sh, with
# nothing but cc, tar, gzip and sha256sum:
#
#   fixtures.sh OUT_DIR worker|krm|big|multi...
#
#   worker  a static native worker (tests/e2e/fixtures/native/worker.c) at
#           /bin/worker, entrypoint ["/bin/worker"]
#   krm     a static KRM function (bench/krm-cat.c) at /bin/krm-cat
#   big     8 layers of 4 MiB random data (for bench/pull.sh)
#   multi   an index: linux/amd64 → the worker image, linux/arm64 → another
#   contract  the worker image with the config label dev.funcd.contract
#   escape  a site's files (/etc/hostname in the image) whose config says
#           WorkingDir "/../../../../../../etc": a way out of the image, if
#           WorkingDir were taken as a host path below the image's root
#
# Each lands in OUT_DIR/<name> as an OCI layout whose image is tagged "1"
# (skopeo: oci:OUT_DIR/<name>:1).
set -eu

out=$1
shift
src=${FUNCD_SOURCE_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
case $(uname -m) in
x86_64) arch=amd64 ;;
aarch64) arch=arm64 ;;
*) arch=$(uname -m) ;;
esac
mkdir -p "$out"
labels=
workdir=/
tmp=$(mktemp -d "$out/.build-XXXXXX")
trap 'rm -rf "$tmp"' EXIT

sha() { sha256sum "$1" | cut -d' ' -f1; }
size() { stat -c %s "$1"; }

# add_blob LAYOUT FILE → moves FILE into the layout, prints its hex digest
add_blob() {
    h=$(sha "$2")
    mv "$2" "$1/blobs/sha256/$h"
    echo "$h"
}

# image LAYOUT ARCH ENTRYPOINT_JSON DIR... → prints "hex size" of the manifest
image() {
    layout=$1 iarch=$2 entry=$3
    shift 3
    mkdir -p "$layout/blobs/sha256"
    layers="" diffs=""
    for dir in "$@"; do
        tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$dir" -cf "$tmp/layer.tar" .
        diffs="$diffs${diffs:+,}\"sha256:$(sha "$tmp/layer.tar")\""
        gzip -n -1 "$tmp/layer.tar"
        lsize=$(size "$tmp/layer.tar.gz")
        lhex=$(add_blob "$layout" "$tmp/layer.tar.gz")
        layers="$layers${layers:+,}{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar+gzip\",\"digest\":\"sha256:$lhex\",\"size\":$lsize}"
    done
    printf '{"architecture":"%s","os":"linux","config":{"Entrypoint":%s,"Env":["PATH=/bin"],"WorkingDir":"%s"%s},"rootfs":{"type":"layers","diff_ids":[%s]}}' \
        "$iarch" "$entry" "$workdir" "${labels:+,\"Labels\":$labels}" "$diffs" >"$tmp/config.json"
    csize=$(size "$tmp/config.json")
    chex=$(add_blob "$layout" "$tmp/config.json")
    printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[%s]}' \
        "$chex" "$csize" "$layers" >"$tmp/manifest.json"
    msize=$(size "$tmp/manifest.json")
    mhex=$(add_blob "$layout" "$tmp/manifest.json")
    echo "$mhex $msize"
}

# finish LAYOUT MEDIATYPE HEX SIZE: the layout's index.json tags it "1"
finish() {
    printf '{"imageLayoutVersion":"1.0.0"}' >"$1/oci-layout"
    printf '{"schemaVersion":2,"manifests":[{"mediaType":"%s","digest":"sha256:%s","size":%s,"annotations":{"org.opencontainers.image.ref.name":"1"}}]}' \
        "$2" "$3" "$4" >"$1/index.json"
}

static_program() { # SOURCE OUT
    cc -static -O2 -D_GNU_SOURCE -pthread -fno-sanitize=all -o "$2" "$1"
}

single() { # NAME ENTRYPOINT DIR...
    name=$1
    shift
    rm -rf "${out:?}/$name"
    set -- $(image "$out/$name" "$arch" "$@")
    finish "$out/$name" application/vnd.oci.image.manifest.v1+json "$1" "$2"
}

for what in "$@"; do
    case $what in
    worker)
        mkdir -p "$tmp/worker/bin"
        static_program "$src/tests/e2e/fixtures/native/worker.c" "$tmp/worker/bin/worker"
        single worker '["/bin/worker"]' "$tmp/worker"
        ;;
    contract)
        # the worker, with the label dev.funcd.contract: it takes {"n": integer} and
        # answers {"total": number}
        mkdir -p "$tmp/contract/bin"
        static_program "$src/tests/e2e/fixtures/native/worker.c" "$tmp/contract/bin/worker"
        labels='{"dev.funcd.contract":"{\"input\":{\"type\":\"object\",\"required\":[\"n\"],\"properties\":{\"n\":{\"type\":\"integer\"}}},\"output\":{\"type\":\"object\",\"required\":[\"total\"],\"properties\":{\"total\":{\"type\":\"number\"}}}}"}'
        single contract '["/bin/worker"]' "$tmp/contract"
        labels=
        ;;
    escape)
        mkdir -p "$tmp/escape/etc"
        echo image-hostname >"$tmp/escape/etc/hostname"
        workdir=/../../../../../../etc
        single escape '["/bin/true"]' "$tmp/escape"
        workdir=/
        ;;
    krm)
        mkdir -p "$tmp/krm/bin"
        static_program "$src/bench/krm-cat.c" "$tmp/krm/bin/krm-cat"
        single krm '["/bin/krm-cat"]' "$tmp/krm"
        ;;
    big)
        dirs=""
        for i in 1 2 3 4 5 6 7 8; do
            mkdir -p "$tmp/big$i/data"
            head -c 4194304 /dev/urandom >"$tmp/big$i/data/part$i"
            dirs="$dirs $tmp/big$i"
        done
        single big '["/bin/sh"]' $dirs
        ;;
    multi)
        rm -rf "$out/multi"
        mkdir -p "$tmp/multi/bin"
        echo amd64 >"$tmp/multi/bin/which"
        set -- $(image "$out/multi" "$arch" '["/bin/which"]' "$tmp/multi")
        echo arm64 >"$tmp/multi/bin/which"
        other=arm64
        [ "$arch" = arm64 ] && other=amd64
        set -- "$@" $(image "$out/multi" "$other" '["/bin/which"]' "$tmp/multi")
        printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"platform":{"os":"linux","architecture":"%s"}},{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"platform":{"os":"linux","architecture":"%s"}}]}' \
            "$3" "$4" "$other" "$1" "$2" "$arch" >"$tmp/index.json"
        isize=$(size "$tmp/index.json")
        ihex=$(add_blob "$out/multi" "$tmp/index.json")
        finish "$out/multi" application/vnd.oci.image.index.v1+json "$ihex" "$isize"
        ;;
    *)
        echo "fixtures.sh: unknown fixture $what" >&2
        exit 2
        ;;
    esac
done
