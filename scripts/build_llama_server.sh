#!/usr/bin/env bash
# Build llama.cpp's `llama-server` from the llama.cpp sources vendored in the
# llama-cpp-python source distribution (PyPI is the one place this project may
# fetch from), and cache the binary OUTSIDE the repository. Builds only when the
# cached binary is missing or does not run; about 9 minutes on 2 cores.
#
#   bash scripts/build_llama_server.sh     # the binary's path is the last line of stdout
#
# Environment:
#   AGENTEVAL_CACHE            cache root (default: ${XDG_CACHE_HOME:-~/.cache}/pytest-agenteval)
#   LLAMA_CPP_PYTHON_VERSION   which sdist to build from (default below)
#   PYTHON                     the interpreter whose pip downloads the sdist (default: python3)
#   JOBS                       parallel compile jobs (default: 2)
#
# The binary lands in $AGENTEVAL_CACHE/llama-server-$VERSION/llama-server, which is
# where tests/test_llama_server.py looks (or point AGENTEVAL_LLAMA_SERVER at it).
# Progress goes to stderr; stdout holds only the path, so `BIN=$(bash ...)` works.
set -euo pipefail

VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
CACHE=${AGENTEVAL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pytest-agenteval}
PYTHON=${PYTHON:-python3}
JOBS=${JOBS:-2}
DEST=$CACHE/llama-server-$VERSION
BIN=$DEST/llama-server

log() { printf 'build_llama_server: %s\n' "$*" >&2; }

runs() { [[ -x $1 ]] && "$1" --version >/dev/null 2>&1; }

if runs "$BIN"; then
  log "cached: $BIN"
  echo "$BIN"
  exit 0
fi

for tool in cmake make c++ tar; do
  command -v "$tool" >/dev/null || { log "needs $tool on PATH"; exit 1; }
done

mkdir -p "$DEST"
# Two builds at once (two CI runs, a developer and CI) would each take 9 minutes
# of the same 2 cores: the second waits for the first and then finds its binary.
exec 9>"$DEST/.lock"
if command -v flock >/dev/null; then
  flock 9
  if runs "$BIN"; then
    log "built meanwhile by another process: $BIN"
    echo "$BIN"
    exit 0
  fi
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/llama-server-build.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
START=$SECONDS

log "downloading the llama-cpp-python $VERSION sdist"
"$PYTHON" -m pip download --quiet --no-binary :all: --no-deps \
  --dest "$WORK/sdist" "llama-cpp-python==$VERSION" >&2
SDIST=$(find "$WORK/sdist" -maxdepth 1 -name 'llama_cpp_python-*.tar.gz' | head -n 1)
[[ -n $SDIST ]] || { log "pip download left no llama_cpp_python-*.tar.gz"; exit 1; }
tar -xzf "$SDIST" -C "$WORK" --wildcards '*/vendor/llama.cpp/*'
SRC=$(find "$WORK" -maxdepth 3 -type d -path '*/vendor/llama.cpp' | head -n 1)
[[ -f $SRC/CMakeLists.txt ]] || { log "$SDIST holds no vendor/llama.cpp/CMakeLists.txt"; exit 1; }

# Static libraries: one self-contained file to cache. GGML_NATIVE=OFF compiles for
# an AVX2/FMA/F16C baseline instead of this CPU, so a cache restored onto another
# x86-64 host still runs. No UI (its assets would be downloaded), no HTTPS, no
# curl, no tests or examples: nothing here reaches past PyPI.
log "configuring $SRC"
cmake -S "$SRC" -B "$WORK/build" \
  -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=OFF \
  -DGGML_NATIVE=OFF \
  -DLLAMA_CURL=OFF \
  -DLLAMA_OPENSSL=OFF \
  -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_UI=OFF \
  -DLLAMA_USE_PREBUILT_UI=OFF \
  >"$WORK/configure.log" 2>&1 || { tail -n 40 "$WORK/configure.log" >&2; exit 1; }

log "building the llama-server target with $JOBS jobs (about 9 minutes on 2 cores)"
cmake --build "$WORK/build" --target llama-server -j "$JOBS" \
  >"$WORK/build.log" 2>&1 || { tail -n 60 "$WORK/build.log" >&2; exit 1; }

BUILT=$WORK/build/bin/llama-server
runs "$BUILT" || { log "the built $BUILT does not run --version"; exit 1; }
# Atomic: a reader sees no binary or the whole one.
cp "$BUILT" "$BIN.tmp.$$"
mv -f "$BIN.tmp.$$" "$BIN"
"$BIN" --version 2>&1 | sed 's/^/build_llama_server: /' >&2 || true
log "built in $((SECONDS - START))s: $BIN ($(du -h "$BIN" | cut -f1))"
echo "$BIN"
