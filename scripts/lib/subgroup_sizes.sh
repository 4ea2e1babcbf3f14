#!/usr/bin/env bash
# The Vulkan kernel tests (tests/vulkan_kernels.rs) at the subgroup sizes lavapipe can be asked
# for besides its default, so that no kernel or variant choice silently assumes one size (the
# H200's 32; Strix Halo's RDNA 3.5 runs 64 or 32). lavapipe's subgroups are its native vector
# width in 32-bit lanes (Mesa's lp_native_vector_width: 256 bits where the CPU has AVX, else
# 128; LP_NATIVE_VECTOR_WIDTH sets it), and it reports minSubgroupSize = maxSubgroupSize =
# that size: a pipeline cannot require another, so each size is a run of its own. Each run sets
# HRX_EXPECT_SUBGROUP, and the binary fails where the device reports another size (a width the
# driver ignored cannot pass as a run at it). What each width gives (Mesa 22.3 is Debian 12's
# lavapipe, 26.1 that of scripts/lib/lavapipe_coopmat.sh):
#   128 bits, 4 lanes: run on Mesa 26.1 (no cooperative matrices at this width). Mesa 22.3
#     leaves outputs of mul_mat_vec_wide over a clamped grid unwritten, which 26.1 does not.
#   256 bits, 8 lanes: the default, run by `cargo test` (22.3) and lavapipe_coopmat_test (26.1).
#   512 bits, 16 lanes: run on Mesa 22.3; Mesa 26.1 crashes (a segmentation fault).
#   1024 and 2048 bits: lavapipe reports subgroups of 32 and 64 but runs 16 lanes together
#     (llvmpipe builds compute shaders at min(width / 32, 16) lanes), which is why the subgroup
#     kernels gave wrong sums there. Only hrx's subgroup probe runs at these widths, and must
#     fail naming the driver (HRX_EXPECT_LANES=16): hrx's self-check then leaves the subgroup
#     kernels out on such a device. The 16 lanes it really runs are tested at 512 bits.
#   64 bits, 2 lanes: below every subgroup kernel's minimum (the portable ones only). Not run.
# Sourced by scripts/test (after lavapipe_coopmat.sh: the 26.1 run uses its driver), or run
# directly: scripts/lib/subgroup_sizes.sh [ARGS] (ARGS go to the test binary).

# subgroup_size_run DRIVER BITS [ARGS]: the kernel tests on DRIVER (system: Debian 12's
# lavapipe; mesa26: Mesa 26.1's) at a native vector width of BITS.
subgroup_size_run() {
  local driver="$1" bits="$2"
  shift 2
  local lanes=$((bits / 32)) bin start=$SECONDS
  bin="$(lavapipe_test_binary vulkan_kernels)"
  if [ -z "$bin" ]; then
    echo "subgroup_sizes: no vulkan_kernels test binary" >&2
    return 1
  fi
  echo "subgroup_sizes: tests/vulkan_kernels.rs on $driver lavapipe, subgroups of $lanes ($bits-bit vectors)" >&2
  # lavapipe at a width other than its native one is several times slower: one submission of
  # the large tile test took over the default 120 s limit at 16 lanes on a 2-core CI machine
  # (the device then counts as hung and every later test of the binary fails); 600 s still
  # ends a real hang.
  local timeout="${HRX_VK_TIMEOUT:-600}"
  case "$driver" in
    system) HRX_VK_TIMEOUT=$timeout LP_NATIVE_VECTOR_WIDTH=$bits HRX_EXPECT_SUBGROUP=$lanes "$bin" "$@" || return 1 ;;
    mesa26) HRX_VK_TIMEOUT=$timeout LP_NATIVE_VECTOR_WIDTH=$bits HRX_EXPECT_SUBGROUP=$lanes lavapipe_run "$bin" "$@" || return 1 ;;
    *)
      echo "subgroup_sizes: no driver $driver" >&2
      return 2
      ;;
  esac
  if [ -n "${HRX_EXPECT_LANES:-}" ]; then
    echo "subgroup_sizes: reported $lanes, runs ${HRX_EXPECT_LANES}: the probe named it, in $((SECONDS - start)) s" >&2
  else
    echo "subgroup_sizes: subgroups of $lanes passed in $((SECONDS - start)) s" >&2
  fi
}

# Every size above that runs: 16 lanes on Debian 12's lavapipe, 4 on Mesa 26.1's where it was
# fetched (lavapipe_coopmat_setup; under CI=true a failed fetch has failed already). At 16 lanes
# the wide mat-vec kernel also runs with a row to one subgroup (HRX_VK_WIDE_TPR: its sums
# without shared memory or barrier, as RDNA's 64 lanes take it by default), without arguments.
subgroup_size_tests() {
  subgroup_size_run system 512 "$@" || return 1
  if [ $# -eq 0 ]; then
    HRX_VK_WIDE_TPR=16 subgroup_size_run system 512 wide_matvec_at_decode_shapes matmul_with_a_fused_residual_every_kernel || return 1
    HRX_EXPECT_LANES=16 subgroup_size_run system 1024 the_subgroup_probe_sees_what_the_device_runs || return 1
    HRX_EXPECT_LANES=16 subgroup_size_run system 2048 the_subgroup_probe_sees_what_the_device_runs || return 1
  fi
  if lavapipe_coopmat_setup; then
    subgroup_size_run mesa26 128 "$@" || return 1
  else
    echo "!!!!! subgroup_sizes: no Mesa 26.1 lavapipe: subgroups of 4 are NOT TESTED !!!!!" >&2
  fi
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  cd "$(dirname "$0")/../.."
  . scripts/lib/lavapipe_coopmat.sh
  subgroup_size_tests "$@"
fi
