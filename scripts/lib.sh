# shellcheck shell=bash
# Shared by scripts/test and scripts/demo: build dependencies, configure, build.
# Source it from the repository root: `source scripts/lib.sh`.

# Debian packages the build and the test suites need.  clang is for the
# libFuzzer and ThreadSanitizer configurations; libclang-rt-14-dev holds
# clang 14's libFuzzer and sanitizer runtimes (only recommended by clang).
# python3-numba is a real driver-level client the interpose suite runs with
# and without cucache (tests/interpose/numba_check.sh).
# g++ builds the C++ test of PyTorch's pool hooks (tests/interpose).
# libunwind-dev and libdw-dev record and name allocation call stacks
# (CUCACHE_STACKS; optional to the build, needed by its tests); scdoc
# builds the man pages; pip, setuptools and wheel install the Python
# package without network, pytest tests it (tests/run: run-python-*).
CUCACHE_DEB_PACKAGES=(meson ninja-build pkg-config libcmocka-dev libjemalloc-dev gcc g++ clang libclang-rt-14-dev python3
    python3-numba libunwind-dev libdw-dev scdoc python3-pip python3-setuptools python3-wheel python3-pytest)

cucache_say() {
    printf '==> %s\n' "$*"
}

# What scripts/deb and tests/run/check_deb.sh need besides the build's dependencies: the Debian
# packaging tools, lintian, and man for the installed pages.
CUCACHE_DEB_TOOLS=(debhelper dh-python dpkg-dev lintian man-db)

# Install the packaging tools when missing (as root), or say what to install.
cucache_ensure_deb_deps() {
    local missing=() pkg
    # A run stopped while dpkg ran (tests/run/check_deb.sh installing the
    # packages) can leave a package half configured, libc-bin's ldconfig
    # trigger among them; the install check would then find the loader's
    # cache stale.  Finish what dpkg left, as root.
    if [ "$EUID" -eq 0 ] && [ -n "$(dpkg --audit 2>/dev/null)" ]; then
        cucache_say "dpkg --configure -a (dpkg --audit: an interrupted run left packages unconfigured)"
        dpkg --configure -a
    fi
    for pkg in "${CUCACHE_DEB_TOOLS[@]}"; do
        dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$EUID" -ne 0 ]; then
        echo "cucache: missing packaging tools: ${missing[*]} (as root: apt-get install ${missing[*]})" >&2
        exit 1
    fi
    cucache_say "installing packaging tools (missing: ${missing[*]})"
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" ||
        { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"; }
}

# Print the Debian packages that are missing, space separated.
cucache_missing_packages() {
    local missing=() pair pkg
    # command:package
    for pair in meson:meson ninja:ninja-build pkg-config:pkg-config gcc:gcc g++:g++ clang:clang python3:python3 nm:binutils \
        scdoc:scdoc; do
        command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
    done
    if command -v dpkg >/dev/null 2>&1; then
        for pkg in libcmocka-dev libjemalloc-dev libclang-rt-14-dev python3-numba libunwind-dev libdw-dev python3-pip \
            python3-setuptools python3-wheel python3-pytest; do
            dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
        done
    fi
    echo "${missing[*]}"
}

# Install what is missing (as root, with apt-get), or say what to install.
cucache_ensure_deps() {
    local missing
    missing=$(cucache_missing_packages)
    if [ -z "$missing" ]; then
        return 0
    fi
    if [ "$EUID" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        echo "cucache: missing build dependencies: $missing" >&2
        echo "cucache: on Debian/Ubuntu, as root: apt-get install --no-install-recommends ${CUCACHE_DEB_PACKAGES[*]}" >&2
        exit 1
    fi
    cucache_say "installing build dependencies (missing: $missing)"
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${CUCACHE_DEB_PACKAGES[@]}"
}

# cucache_configure DIR [MESON OPTIONS...]: set up DIR, or reconfigure it with
# the options given when it exists.  A directory left broken by an earlier
# failure is wiped and set up again.
cucache_configure() {
    local dir=$1
    shift
    if [ -d "$dir/meson-private" ]; then
        cucache_say "meson setup --reconfigure $dir $*"
        meson setup --reconfigure "$dir" "$@" || {
            cucache_say "reconfigure failed: meson setup --wipe $dir $*"
            meson setup --wipe "$dir" "$@"
        }
    else
        cucache_say "meson setup $dir $*"
        meson setup "$dir" "$@"
    fi
}

# cucache_build DIR: build every target of DIR.
cucache_build() {
    cucache_say "ninja -C $1"
    ninja -C "$1"
}

# The simulated device (subprojects/cusim): LD_LIBRARY_PATH=$(cucache_sim_libdir
# build) runs a program linked against libcudart.so.12/13 and libcuda.so.1
# on it.
cucache_sim_libdir() {
    echo "$PWD/$1/subprojects/cusim/lib"
}

# Succeeds when an NVIDIA GPU and its driver answer.
cucache_have_gpu() {
    command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1
}

# The CUDA toolkit's library directory (real libcudart), or nothing.
cucache_cuda_libdir() {
    local root=${CUDA_HOME:-${CUDA_PATH:-}} dir
    if [ -z "$root" ]; then
        if [ -d /usr/local/cuda ]; then
            root=/usr/local/cuda
        elif command -v nvcc >/dev/null 2>&1; then
            root=$(dirname "$(dirname "$(command -v nvcc)")")
        fi
    fi
    for dir in "$root/lib64" "$root/targets/x86_64-linux/lib" "$root/targets/sbsa-linux/lib" "$root/lib"; do
        if [ -n "$root" ] && ls "$dir"/libcudart.so.* >/dev/null 2>&1; then
            echo "$dir"
            return 0
        fi
    done
}
