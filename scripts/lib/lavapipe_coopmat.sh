#!/usr/bin/env bash
# Mesa 26.1's lavapipe, the first CPU Vulkan driver with cooperative matrices (8 x 8 x 8 f16
# into f32 at subgroup scope, subgroups of 8): with it the cooperative-matrix kernels
# (mul_mat_cm, its narrow build, mul_mat_cm_exact, flash_attn_cm, activations kept in halves)
# run without a GPU. Debian 12's lavapipe (Mesa 22.3) has none,
# so the normal suite never runs them; scripts/test runs the Vulkan kernel, executor and oracle tests
# a second time on this driver.
#
# Debian 13 (trixie) has it in trixie-backports. `lavapipe_coopmat_setup` downloads
# mesa-vulkan-drivers from there and the trixie libraries libvulkan_lvp.so needs (the Vulkan
# loader, glibc, LLVM 19, X11/Wayland client stubs: those in LAVAPIPE_PACKAGES, ~55 MB) with
# `apt-get download` under a private apt state in .lavapipe/ (its own sources list, lists and
# cache: the system's apt is left alone, as scripts/build_shaders --setup does for glslc),
# unpacks them into .lavapipe/root (dropping the other drivers), and writes an ICD file naming
# the driver by absolute path. `lavapipe_coopmat_run BINARY ARGS...` runs a binary built on
# Debian 12 there: through trixie's own dynamic loader with trixie's libraries first, the ICD
# as the only Vulkan driver (VK_DRIVER_FILES), HRX_DEVICE=0 (lavapipe, which hrx would
# otherwise pass over for its CPU backend) and HRX_EXPECT_COOPMAT=1 (the tests fail, rather
# than skip, without cooperative matrices). Two libraries come from the host, as Debian 12's
# own mesa-vulkan-drivers (scripts/lib/deps.sh) installs them: libdrm.so.2 and libz3.so.4 (LLVM
# links it for clang's analyzer, which lavapipe never calls); setup checks that every library
# resolves.
#
# Sourced by scripts/test, or run directly:
#   scripts/lib/lavapipe_coopmat.sh setup            fetch the driver into .lavapipe/ (network)
#   scripts/lib/lavapipe_coopmat.sh run BINARY ...   run a binary on it
#   scripts/lib/lavapipe_coopmat.sh test [ARGS]      build and run tests/vulkan_kernels.rs,
#                                                    tests/vulkan_executor.rs and
#                                                    tests/vulkan_oracle.rs on it
# Setup is skipped when .lavapipe/ already holds what LAVAPIPE_PACKAGES names.

LAVAPIPE_DIR="${LAVAPIPE_DIR:-.lavapipe}"
# mesa-vulkan-drivers from trixie-backports (whatever it holds now: 26.1 or later), the rest
# from trixie: the closure of libvulkan_lvp.so's and the loader's shared libraries.
LAVAPIPE_PACKAGES=(mesa-vulkan-drivers/trixie-backports libvulkan1 libc6 libgcc-s1 libstdc++6 libllvm19
  libdisplay-info2 libdrm2 libedit2 libexpat1 libffi8 liblzma5 libmd0 libbsd0 libtinfo6 libwayland-client0
  libx11-xcb1 libxau6 libxcb1 libxcb-dri3-0 libxcb-present0 libxcb-randr0 libxcb-shm0 libxcb-sync1
  libxcb-xfixes0 libxdmcp6 libxml2 libxshmfence1 libzstd1 zlib1g)

# Where the driver is (absolute), for the run function.
_lavapipe_root() {
  echo "$(cd "$LAVAPIPE_DIR" && pwd)/root"
}

lavapipe_coopmat_setup() {
  local stamp="$LAVAPIPE_DIR/packages"
  if [ -f "$LAVAPIPE_DIR/lvp_icd.json" ] && [ "$(cat "$stamp" 2>/dev/null)" = "${LAVAPIPE_PACKAGES[*]}" ]; then
    return 0
  fi
  local state
  mkdir -p "$LAVAPIPE_DIR"
  state="$(cd "$LAVAPIPE_DIR" && pwd)/apt"
  mkdir -p "$state/lists/partial" "$state/cache/archives/partial" "$LAVAPIPE_DIR/debs"
  printf '%s\n' "deb http://deb.debian.org/debian trixie main" \
    "deb http://deb.debian.org/debian trixie-backports main" >"$state/sources.list"
  # Only the package lists (no translations, no AppStream metadata).
  local o=(-o "Dir::Etc::SourceList=$state/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$state/lists" -o "Dir::Cache=$state/cache"
    -o APT::Architecture=amd64 -o APT::Architectures=amd64 -o Acquire::Languages=none
    -o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false)
  echo "lavapipe_coopmat: fetching Mesa's lavapipe from trixie-backports into $LAVAPIPE_DIR/" >&2
  apt-get "${o[@]}" update -qq || return 1
  rm -f "$LAVAPIPE_DIR"/debs/*.deb
  (cd "$LAVAPIPE_DIR/debs" && apt-get -qq "${o[@]}" download "${LAVAPIPE_PACKAGES[@]}" 2>&1 |
    grep -v '^W: Download is performed unsandboxed') || true
  local n
  n="$(ls "$LAVAPIPE_DIR"/debs/*.deb 2>/dev/null | wc -l)"
  if [ "$n" != "${#LAVAPIPE_PACKAGES[@]}" ]; then
    echo "lavapipe_coopmat: downloaded $n of ${#LAVAPIPE_PACKAGES[@]} packages" >&2
    return 1
  fi
  local root="$LAVAPIPE_DIR/root"
  rm -rf "$root" && mkdir -p "$root"
  for deb in "$LAVAPIPE_DIR"/debs/*.deb; do
    dpkg-deb -x "$deb" "$root" || return 1
  done
  # Only lavapipe of Mesa's drivers, no documentation, no locales.
  find "$root/usr/lib/x86_64-linux-gnu" -maxdepth 1 -name 'libvulkan_*.so' ! -name libvulkan_lvp.so -delete
  rm -rf "$root/usr/share/doc" "$root/usr/share/locale" "$root/usr/share/man" "$root/usr/share/lintian"
  local lib icd
  lib="$(_lavapipe_root)/usr/lib/x86_64-linux-gnu/libvulkan_lvp.so"
  icd="$root/usr/share/vulkan/icd.d/lvp_icd.json"
  if [ ! -f "$lib" ] || [ ! -f "$icd" ]; then
    echo "lavapipe_coopmat: mesa-vulkan-drivers holds no lavapipe ($lib, $icd)" >&2
    return 1
  fi
  sed -E "s#\"library_path\": *\"[^\"]*\"#\"library_path\": \"$lib\"#" "$icd" >"$LAVAPIPE_DIR/lvp_icd.json"
  # Every library the driver needs resolves (trixie's first, then the host's).
  local missing
  missing="$(_lavapipe_exec --list "$lib" | grep 'not found' || true)"
  if [ -n "$missing" ]; then
    echo "lavapipe_coopmat: libraries of $lib not found: $missing" >&2
    return 1
  fi
  dpkg-deb -f "$LAVAPIPE_DIR"/debs/mesa-vulkan-drivers_*.deb Version >"$LAVAPIPE_DIR/mesa-version"
  echo "lavapipe_coopmat: Mesa $(cat "$LAVAPIPE_DIR/mesa-version") in $LAVAPIPE_DIR/ ($(du -sh "$LAVAPIPE_DIR/debs" | cut -f1) downloaded)" >&2
  # The packages are unpacked; only the stamp says what they were.
  rm -rf "$LAVAPIPE_DIR/debs" "$state/cache"
  echo "${LAVAPIPE_PACKAGES[*]}" >"$stamp"
}

# Runs a program through trixie's dynamic loader with trixie's libraries first.
_lavapipe_exec() {
  local r
  r="$(_lavapipe_root)"
  "$r/usr/lib64/ld-linux-x86-64.so.2" --library-path "$r/usr/lib/x86_64-linux-gnu:$r/lib/x86_64-linux-gnu" "$@"
}

# lavapipe_run BINARY ARGS...: BINARY (built on Debian 12) on Mesa 26.1's lavapipe, as the
# only Vulkan device.
lavapipe_run() {
  VK_DRIVER_FILES="$(cd "$LAVAPIPE_DIR" && pwd)/lvp_icd.json" HRX_DEVICE=0 _lavapipe_exec "$@"
}

# lavapipe_coopmat_run BINARY ARGS...: as lavapipe_run, where the tests fail without
# cooperative matrices (the kernels on them are the default there).
lavapipe_coopmat_run() {
  HRX_EXPECT_COOPMAT=1 lavapipe_run "$@"
}

# The test executable of tests/NAME.rs, built (release) if needed.
lavapipe_test_binary() {
  cargo test --release --locked --no-run --message-format=json --test "$1" |
    grep -o "\"executable\":\"[^\"]*/$1-[^\"]*\"" | sed 's/^"executable":"//; s/"$//' | tail -1
}

# Sets up the driver and runs tests/vulkan_kernels.rs (the kernels) and tests/vulkan_executor.rs
# (plans that choose them: batched decode on the narrow tiles) on it (ARGS go to each binary).
# Under CI=true any failure to get the driver fails; elsewhere it is a loud skip.
lavapipe_coopmat_test() {
  if ! lavapipe_coopmat_setup; then
    if [ "${CI:-}" = true ]; then
      echo "lavapipe_coopmat: FAILED to fetch Mesa's lavapipe with cooperative matrices (CI=true)" >&2
      return 1
    fi
    echo "!!!!! lavapipe_coopmat: no Mesa lavapipe with cooperative matrices: the cooperative-matrix kernels are NOT TESTED !!!!!" >&2
    return 0
  fi
  local test bin start
  # The oracle's models end to end too: with cooperative matrices the products read activations
  # kept in halves (Registry::keeps_halves), which Debian's lavapipe never plans.
  for test in vulkan_kernels vulkan_executor vulkan_oracle; do
    bin="$(lavapipe_test_binary "$test")"
    if [ -z "$bin" ]; then
      echo "lavapipe_coopmat: no $test test binary" >&2
      return 1
    fi
    echo "lavapipe_coopmat: tests/$test.rs on Mesa $(cat "$LAVAPIPE_DIR/mesa-version")'s lavapipe" >&2
    start=$SECONDS
    lavapipe_coopmat_run "$bin" "$@" || return 1
    echo "lavapipe_coopmat: $test passed in $((SECONDS - start)) s" >&2
  done
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  cd "$(dirname "$0")/../.."
  case "${1:-}" in
    setup) lavapipe_coopmat_setup ;;
    run) shift && lavapipe_coopmat_setup && lavapipe_coopmat_run "$@" ;;
    test) shift && lavapipe_coopmat_test "$@" ;;
    *)
      echo "usage: scripts/lib/lavapipe_coopmat.sh setup | run BINARY [ARGS...] | test [ARGS...]" >&2
      exit 2
      ;;
  esac
fi
