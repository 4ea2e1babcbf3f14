# Sourced by scripts/test and scripts/describe: installs what building and testing hrx needs on
# Debian 12, and nothing that is already there. Needs root (or sudo) only when something is missing.

# Debian packages the build and the tests use: a C linker for Rust, and (for the Vulkan tests)
# the Vulkan loader and Mesa's software device lavapipe.
HRX_APT_PACKAGES=(gcc libc6-dev pkg-config ca-certificates curl libvulkan1 mesa-vulkan-drivers)

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

# Installs the packages of "$@" that are missing, and only those: --no-upgrade keeps apt from
# upgrading any that are installed. apt's own output goes to a log; stderr gets one line before
# and one after (or the log's end, on a failure), so stdout stays the command's.
ensure_apt_packages() {
  local missing=() p log upgrades
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log="$(mktemp "${TMPDIR:-/tmp}/hrx-apt.XXXXXX")"
  echo "hrx: installing Debian packages ${missing[*]} with apt-get (its output: $log)" >&2
  local apt=(as_root env DEBIAN_FRONTEND=noninteractive apt-get -q -y -o Dpkg::Progress-Fancy=0)
  local install=(install --no-install-recommends --no-upgrade "${missing[@]}")
  if ! "${apt[@]}" update >>"$log" 2>&1; then
    tail -n 5 "$log" >&2
    echo "hrx: apt-get update failed (all of its output: $log)" >&2
    return 1
  fi
  # A new package may need newer versions of installed ones (mesa's share one version): said,
  # since --no-upgrade cannot hold those back.
  upgrades="$("${apt[@]}" -s "${install[@]}" 2>/dev/null | awk '/^Inst [^ ]+ \[/ {print $2}' | paste -sd ' ' || true)"
  if [ -n "$upgrades" ]; then
    echo "hrx: apt-get also upgrades installed packages these need newer versions of: $upgrades" >&2
  fi
  if ! "${apt[@]}" "${install[@]}" >>"$log" 2>&1; then
    tail -n 5 "$log" >&2
    echo "hrx: apt-get install failed (all of its output: $log)" >&2
    return 1
  fi
  echo "hrx: installed ${missing[*]}" >&2
}

# Debian 12's rustc (1.63) is too old; rustup's stable is what hrx is built with.
ensure_rust() {
  [ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
  if ! command -v cargo >/dev/null; then
    echo "hrx: installing the Rust toolchain with rustup" >&2
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal >&2
    . "$HOME/.cargo/env"
  fi
}

# The checks scripts/test runs besides the tests: rustfmt and clippy (rustup's minimal
# profile has neither).
ensure_rust_tools() {
  if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
    echo "hrx: installing rustfmt and clippy with rustup" >&2
    rustup component add rustfmt clippy >&2
  fi
}

# The release binary BINARY (where cargo puts it), built or brought up to date. Without one
# yet, says so and shows cargo's progress (a first build takes minutes); a rebuild is quiet.
# Everything on stderr.
build_hrx() {
  if [ -x "$1" ]; then
    cargo build --release --locked -q
  else
    echo "hrx: building hrx (cargo build --release; the first build takes a few minutes)" >&2
    cargo build --release --locked
  fi
}

ensure_build_deps() {
  ensure_apt_packages "${HRX_APT_PACKAGES[@]}"
  ensure_rust
}
