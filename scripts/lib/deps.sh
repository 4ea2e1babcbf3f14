# Sourced by scripts/test and scripts/describe: installs what building and testing hrx needs on
# Debian 12, and nothing that is already there. Needs root (or sudo) only when something is missing.

# Debian packages the build and the tests use: a C linker for Rust, and (for the Vulkan tests)
# the Vulkan loader and Mesa's software device lavapipe.
HRX_APT_PACKAGES=(gcc libc6-dev pkg-config ca-certificates curl libvulkan1 mesa-vulkan-drivers)

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

ensure_apt_packages() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "installing Debian packages: ${missing[*]}" >&2
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
}

# Debian 12's rustc (1.63) is too old; rustup's stable is what hrx is built with.
ensure_rust() {
  [ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
  if ! command -v cargo >/dev/null; then
    echo "installing the Rust toolchain with rustup" >&2
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
    . "$HOME/.cargo/env"
  fi
}

# The checks scripts/test runs besides the tests: rustfmt and clippy (rustup's minimal
# profile has neither).
ensure_rust_tools() {
  if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
    echo "installing rustfmt and clippy with rustup" >&2
    rustup component add rustfmt clippy
  fi
}

ensure_build_deps() {
  ensure_apt_packages "${HRX_APT_PACKAGES[@]}"
  ensure_rust
}
