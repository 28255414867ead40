# Shared by scripts/demo, scripts/test and scripts/fuzz: install missing Debian packages.
# Each package is here for a reason given in docs/dependencies.md.

# ensure_packages PKG... : apt-get installs whichever of PKG are not installed yet.
ensure_packages() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "installing: ${missing[*]}" >&2
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
}

BUILD_PACKAGES=(g++ cmake ninja-build pkg-config libpcre2-dev libutf8proc-dev libmicrohttpd-dev libsqlite3-dev libcpp-httplib-dev nlohmann-json3-dev libpng-dev libjpeg62-turbo-dev libwebp-dev libgif-dev
  libopenmpi-dev openmpi-bin libvulkan-dev glslc)
TEST_PACKAGES=(libgtest-dev curl clang-format haproxy prometheus chromium mesa-vulkan-drivers)
FUZZ_PACKAGES=(clang libclang-rt-14-dev libgtest-dev)
# The AArch64 cross build (scripts/cross-build) and its emulated test stage: Debian's cross
# compiler, user-mode QEMU, and the arm64 packages of the libraries the binary links (Open MPI's
# arm64 package cannot be installed beside the host's: that build goes without it).
ARM64_PACKAGES=(g++-aarch64-linux-gnu qemu-user-static libstdc++6:arm64 libpcre2-dev:arm64
  libutf8proc-dev:arm64 libmicrohttpd-dev:arm64 libsqlite3-dev:arm64 libpng-dev:arm64
  libjpeg62-turbo-dev:arm64 libwebp-dev:arm64 libgif-dev:arm64 libvulkan-dev:arm64
  libgtest-dev:arm64)

# ensure_arm64_packages: the arm64 architecture in dpkg, then ARM64_PACKAGES.
ensure_arm64_packages() {
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo dpkg --add-architecture arm64
    $sudo apt-get update -qq >&2
  fi
  ensure_packages "${ARM64_PACKAGES[@]}"
}

# cross_build_aarch64 [CMAKE_ARG...]: configures build-aarch64 for AArch64 (cmake/aarch64-linux-
# gnu.cmake) and builds paddock and the kernel tests (ARM_TARGETS: other targets).
cross_build_aarch64() {
  cmake -S "$ROOT" -B "$ARM_DIR" -G Ninja -DCMAKE_TOOLCHAIN_FILE="$ROOT/cmake/aarch64-linux-gnu.cmake" \
    -DCMAKE_BUILD_TYPE=Release -DPADDOCK_MPI=OFF -DPADDOCK_BUILD_LOADGEN=OFF \
    -DPADDOCK_TESTS=OFF -DPADDOCK_KERNEL_TESTS=ON "$@" >/dev/null &&
    cmake --build "$ARM_DIR" -j "$JOBS" --target ${ARM_TARGETS:-paddock paddock_kernel_tests} | tail -n 1
}

# ensure_node: Node.js and npm for the OpenAI client test (Debian's if the machine has none).
ensure_node() {
  command -v node >/dev/null && command -v npm >/dev/null && return 0
  ensure_packages nodejs npm
}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PADDOCK_MODELS=${PADDOCK_MODELS:-$ROOT/../shared/models}
JOBS=${JOBS:-$(nproc)}
ARM_DIR=$ROOT/build-aarch64  # the AArch64 cross build (cross_build_aarch64)

# The AddressSanitizer + UndefinedBehaviorSanitizer build, one for two stages: scripts/test's
# ASan tests and the fuzzers (scripts/fuzz). clang, -O1 with line tables, and every object with
# libFuzzer's coverage (-fsanitize=fuzzer-no-link), so the fuzz targets link the libraries the
# tests ran instead of a third build of them. The SIMD kernels are the Release build's
# (PADDOCK_KERNELS_LIB; built here first if missing). A unity build (eight files of a library
# to a translation unit; the test files each their own): half the compile time of one file
# each, the headers parsed once per batch.
ASAN_DIR=$ROOT/build-address
configure_asan() {
  if [ ! -f "$ROOT/build/libpaddock_kernels.a" ]; then
    cmake -S "$ROOT" -B "$ROOT/build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null &&
      cmake --build "$ROOT/build" -j "$JOBS" --target paddock_kernels | tail -n 1
  fi
  CC=clang CXX=clang++ cmake -S "$ROOT" -B "$ASAN_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    "-DPADDOCK_KERNELS_LIB=$ROOT/build/libpaddock_kernels.a" \
    "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -g1 -DNDEBUG" -DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link \
    -DPADDOCK_SANITIZE=address,undefined -DPADDOCK_FUZZ=ON -DPADDOCK_TESTS=ON -DPADDOCK_TOOLS=ON \
    -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=8 \
    -DPADDOCK_STRESS_SECONDS=6 "-DPADDOCK_LOADGEN_BIN=$ROOT/build/paddock-loadgen" >/dev/null
}
FUZZ_TARGETS=(fuzz_gguf fuzz_llama2c fuzz_jinja fuzz_http fuzz_api fuzz_grammar fuzz_image)

# run_ctest DIR LOG [CTEST_ARGS...] : runs CTest in DIR, appends its output to LOG, and fails
# unless at least one test ran and none failed. (CTest itself exits 0 when it finds no test
# at all — "No tests were found!!!" — which would let a misconfigured stage pass silently.)
run_ctest() {
  local dir=$1 log=$2
  shift 2
  local out rc=0
  out=$(mktemp)
  # The longest tests first (CTest orders a parallel run by its cost data: a fresh build has
  # none and would start them in declaration order, the long integration tests last, one of
  # them alone at the end): the costs a run measured, seeded where the build has none yet.
  if [ ! -f "$dir/Testing/Temporary/CTestCostData.txt" ]; then
    mkdir -p "$dir/Testing/Temporary"
    cp "$ROOT/tests/ctest-costs.txt" "$dir/Testing/Temporary/CTestCostData.txt"
  fi
  (cd "$dir" && ctest "$@") >"$out" 2>&1 || rc=$?
  cat "$out"
  cat "$out" >>"$log"
  local ran
  ran=$(grep -o 'tests failed out of [0-9]*' "$out" | awk '{s += $5} END {print s + 0}')
  rm -f "$out"
  if [ "$ran" -eq 0 ]; then
    echo "no test ran in $dir (ctest $*): a stage that runs no test fails" >&2
    return 1
  fi
  return "$rc"
}
