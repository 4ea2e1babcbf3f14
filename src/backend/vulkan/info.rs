//! What a physical device is and can do: the facts `hrx doctor` prints and device selection
//! weighs. Gathered once per device from the instance; no logical device needed.

use super::error::{call, Result};
use super::kernels::CoopMat;
use ash::vk;
use std::ffi::CStr;
use std::fmt;

/// Kind of device, in the order hrx prefers them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum DeviceKind {
    Other,
    Cpu,
    Virtual,
    Integrated,
    Discrete,
}

impl DeviceKind {
    fn from_vk(t: vk::PhysicalDeviceType) -> DeviceKind {
        match t {
            vk::PhysicalDeviceType::DISCRETE_GPU => DeviceKind::Discrete,
            vk::PhysicalDeviceType::INTEGRATED_GPU => DeviceKind::Integrated,
            vk::PhysicalDeviceType::VIRTUAL_GPU => DeviceKind::Virtual,
            vk::PhysicalDeviceType::CPU => DeviceKind::Cpu,
            _ => DeviceKind::Other,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DeviceKind::Discrete => "discrete GPU",
            DeviceKind::Integrated => "integrated GPU",
            DeviceKind::Virtual => "virtual GPU",
            DeviceKind::Cpu => "CPU",
            DeviceKind::Other => "other",
        }
    }
}

/// A memory heap: size and what its memory types offer.
#[derive(Clone, Debug, PartialEq)]
pub struct Heap {
    pub size: u64,
    pub device_local: bool,
    /// Some memory type of this heap can be mapped by the host.
    pub host_visible: bool,
    /// Some mapped memory type of this heap is cached on the host (reads of uncached memory,
    /// such as read-back logits, run at a fraction of the memory's speed).
    pub host_cached: bool,
}

/// A cooperative-matrix shape: A is m x k, B k x n, the accumulator m x n.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CoopShape {
    pub m: u32,
    pub n: u32,
    pub k: u32,
}

impl fmt::Display for CoopShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}x{}", self.m, self.n, self.k)
    }
}

/// The subgroup sizes hrx's subgroup kernels (and its cooperative-matrix kernels, whose
/// workgroups are four subgroups) have run at in a test, and so the only sizes they run at:
/// 4, 8 and 16 on lavapipe in CI (scripts/lib/subgroup_sizes.sh; lavapipe's reported 32 and 64
/// run 16 lanes, see `selfcheck::probe`), 32 on NVIDIA (scripts/device_vulkan_tests). RDNA's
/// wave64 is not among them: nothing of hrx has run on AMD, so there its kernels require 32.
pub const TESTED_SUBGROUP_SIZES: [u32; 4] = [4, 8, 16, 32];

/// The size taken wherever a pipeline may require it: the one tested on a GPU.
const PREFERRED_SUBGROUP: u32 = 32;

/// Optional capabilities hrx may use (false where unknown: a Vulkan 1.0 device).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Features {
    pub storage_16bit: bool,
    pub storage_8bit: bool,
    pub float16: bool,
    pub int8: bool,
    pub int16: bool,
    pub int64: bool,
    /// VK_KHR_cooperative_matrix or VK_NV_cooperative_matrix is offered.
    pub cooperative_matrix: bool,
    /// VK_KHR_shader_integer_dot_product (or Vulkan 1.3) is offered.
    pub integer_dot_product: bool,
    /// VK_EXT_subgroup_size_control (or Vulkan 1.3) is offered.
    pub subgroup_size_control: bool,
    /// The shapes of f16 x f16 products into f32 accumulators at subgroup scope that
    /// VK_KHR_cooperative_matrix lists (what the `mul_mat_cm` kernels may use), in the
    /// device's order; empty where its feature is off.
    pub coopmat_f16_shapes: Vec<CoopShape>,
    /// The Vulkan memory model (Vulkan 1.2's vulkanMemoryModel), which cooperative-matrix
    /// shaders declare.
    pub memory_model: bool,
    /// A compute pipeline can require any subgroup size of `DeviceInfo::subgroup_sizes` with
    /// full subgroups (subgroupSizeControl, computeFullSubgroups, compute among the stages).
    pub full_subgroups: bool,
}

/// Everything hrx reads about one physical device.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    /// Position in the loader's enumeration (what `HRX_DEVICE=N` names).
    pub index: usize,
    pub(crate) handle: vk::PhysicalDevice,
    pub name: String,
    pub kind: DeviceKind,
    pub vendor_id: u32,
    pub device_id: u32,
    /// Vulkan version the device supports, as (major, minor, patch).
    pub api_version: (u32, u32, u32),
    pub driver_name: Option<String>,
    pub driver_info: Option<String>,
    /// The driver version decoded the way its vendor encodes it.
    pub driver_version: String,
    pub pipeline_cache_uuid: [u8; 16],
    pub heaps: Vec<Heap>,
    /// Memory the device reads at full speed is also host-mapped: buffers are written in
    /// place, without staging copies.
    pub unified_memory: bool,
    /// Subgroup size and supported subgroup operations (0 and empty where unknown).
    pub subgroup_size: u32,
    /// The smallest and largest subgroup size a pipeline may require (minSubgroupSize and
    /// maxSubgroupSize: 32 and 64 on AMD's RDNA, whose default is 64); the default size twice
    /// where the device has no subgroup size control.
    pub subgroup_sizes: (u32, u32),
    pub subgroup_ops: Vec<&'static str>,
    /// Compute shaders may use the subgroup operations (the compute stage is among those
    /// the device supports them in).
    pub subgroup_in_compute: bool,
    pub max_shared_memory: u32,
    pub max_workgroup_invocations: u32,
    pub max_workgroup_count: [u32; 3],
    pub max_push_constants: u32,
    pub max_storage_buffer_range: u32,
    pub min_storage_buffer_offset_alignment: u64,
    pub features: Features,
    /// The queue family hrx would use (compute-capable, preferably without graphics).
    pub compute_queue_family: Option<u32>,
    /// Valid bits of timestamps written on that queue family; 0: it cannot write them (a
    /// device with timestampComputeAndGraphics has them on every compute family).
    pub timestamp_bits: u32,
    /// Nanoseconds per timestamp tick (timestampPeriod).
    pub timestamp_period: f32,
    pub(crate) extensions: Vec<String>,
}

impl DeviceInfo {
    /// Bytes of device-local memory (largest device-local heap).
    pub fn device_local_bytes(&self) -> u64 {
        self.heaps.iter().filter(|h| h.device_local).map(|h| h.size).max().unwrap_or(0)
    }

    pub fn has_extension(&self, name: &str) -> bool {
        self.extensions.iter().any(|e| e == name)
    }

    /// The subgroup size every subgroup kernel runs at here (`mul_mat_vec_sg`, `mul_mat_vec_wide`,
    /// `flash_attn_split`), where the device runs them: subgroup arithmetic in compute shaders,
    /// and a size some test ran them at ([`TESTED_SUBGROUP_SIZES`]): 32 where a pipeline may
    /// require it (RDNA's wave32, not the wave64 RADV would pick), else the default size when
    /// a test ran it. Devices with size control require it ([`DeviceInfo::pins_subgroups`]);
    /// without, the default is the only size, so it runs at that. Whether hrx uses them is
    /// `Variants::for_device`'s choice (and the self-check's, which runs them here first).
    pub fn subgroup_kernels(&self) -> Option<u32> {
        if !self.subgroup_in_compute || !self.subgroup_ops.contains(&"arithmetic") {
            return None;
        }
        let pinned = |s: u32| self.pins_subgroups() && (self.subgroup_sizes.0..=self.subgroup_sizes.1).contains(&s);
        let tested = |s: &u32| TESTED_SUBGROUP_SIZES.contains(s);
        [PREFERRED_SUBGROUP].into_iter().filter(|&s| pinned(s)).chain([self.subgroup_size]).find(tested)
    }

    /// Whether a pipeline can require its subgroup size, with full subgroups: hrx's subgroup
    /// kernels then always do, so they run at the size their variant names and no other.
    pub fn pins_subgroups(&self) -> bool {
        self.features.full_subgroups
    }

    /// The cooperative-matrix variant of the matrix-matrix products (`mul_mat_cm_*` and
    /// `mul_mat_cm_exact_*`, workgroups of four subgroups), where the device runs them: f16
    /// cooperative matrices, f16 arithmetic, the Vulkan memory model, full subgroups of a size
    /// the pipeline requires (on a Vulkan 1.3 device), and a listed shape whose kernels fit the
    /// shared memory at one of the subgroup sizes the device allows (`CoopMat::choose`: 16 x 16
    /// x 16 where listed, 8 x 8 x 8 on lavapipe; on RDNA subgroups of 32, as 64 would take
    /// 128 x 128 tiles, more than its 64 KiB). Whether hrx uses them is `Variants::for_device`'s
    /// choice.
    pub fn coopmat_matmul(&self) -> Option<CoopMat> {
        let f = &self.features;
        // Vulkan 1.3: the features it needs are core, enabled without further extensions.
        let core = self.api_version >= (1, 3, 0);
        let usable = core && f.float16 && f.memory_model && f.full_subgroups && self.subgroup_in_compute;
        if !usable {
            return None;
        }
        // The default size first (the kernels were measured at it), then the others the
        // device lets a pipeline require; only sizes a test ran (`TESTED_SUBGROUP_SIZES`), and
        // `CoopMat::choose` keeps those its kernels take.
        let (min, max) = self.subgroup_sizes;
        let allowed = |s: u32| {
            (min..=max).contains(&s) && 4 * s <= self.max_workgroup_invocations && TESTED_SUBGROUP_SIZES.contains(&s)
        };
        let others = (0..=7).map(|b| 1u32 << b).filter(|&s| s != self.subgroup_size);
        let candidates: Vec<u32> = std::iter::once(self.subgroup_size).chain(others).filter(|&s| allowed(s)).collect();
        CoopMat::choose(&f.coopmat_f16_shapes, &candidates, self.max_shared_memory)
    }

    /// Whether dispatches can be timed on the compute queue (`HRX_VK_PROFILE`).
    pub fn can_time(&self) -> bool {
        self.timestamp_bits > 0 && self.timestamp_period > 0.0
    }

    /// The driver as a person names it: its name and info where the device gives them (`NVIDIA
    /// 580.159.04`, `llvmpipe Mesa 22.3.6 (LLVM 15.0.6)`), its version.
    pub fn driver(&self) -> String {
        let named: Vec<&str> =
            [self.driver_name.as_deref(), self.driver_info.as_deref()].into_iter().flatten().collect();
        match named.is_empty() {
            true => format!("version {}", self.driver_version),
            false => format!("{}, version {}", named.join(" "), self.driver_version),
        }
    }

    /// "1.3.230"
    pub fn api_version_str(&self) -> String {
        let (a, b, c) = self.api_version;
        format!("{a}.{b}.{c}")
    }
}

fn c_string(s: std::result::Result<&CStr, std::ffi::FromBytesUntilNulError>) -> String {
    s.map(|c| c.to_string_lossy().into_owned()).unwrap_or_default()
}

fn version_tuple(v: u32) -> (u32, u32, u32) {
    (vk::api_version_major(v), vk::api_version_minor(v), vk::api_version_patch(v))
}

/// NVIDIA packs 10.8.8.6 bits, Intel on Windows 18.14; everyone else uses Vulkan's encoding.
pub fn decode_driver_version(vendor_id: u32, v: u32) -> String {
    match vendor_id {
        0x10DE => format!("{}.{}.{}.{}", v >> 22, (v >> 14) & 0xFF, (v >> 6) & 0xFF, v & 0x3F),
        _ => {
            let (a, b, c) = version_tuple(v);
            format!("{a}.{b}.{c}")
        }
    }
}

const SUBGROUP_OPS: [(vk::SubgroupFeatureFlags, &str); 8] = [
    (vk::SubgroupFeatureFlags::BASIC, "basic"),
    (vk::SubgroupFeatureFlags::VOTE, "vote"),
    (vk::SubgroupFeatureFlags::ARITHMETIC, "arithmetic"),
    (vk::SubgroupFeatureFlags::BALLOT, "ballot"),
    (vk::SubgroupFeatureFlags::SHUFFLE, "shuffle"),
    (vk::SubgroupFeatureFlags::SHUFFLE_RELATIVE, "shuffle_relative"),
    (vk::SubgroupFeatureFlags::CLUSTERED, "clustered"),
    (vk::SubgroupFeatureFlags::QUAD, "quad"),
];

/// Reads one physical device. `instance_api` is the instance's Vulkan version: the `*2`
/// queries are core from 1.1 on.
pub(crate) fn query(
    entry: &ash::Entry,
    instance: &ash::Instance,
    instance_api: u32,
    index: usize,
    pd: vk::PhysicalDevice,
) -> Result<DeviceInfo> {
    // SAFETY: `pd` was enumerated from this live instance; the queries only write the
    // structures passed in.
    let (props, mem, families, ext_props) = unsafe {
        (
            instance.get_physical_device_properties(pd),
            instance.get_physical_device_memory_properties(pd),
            instance.get_physical_device_queue_family_properties(pd),
            instance.enumerate_device_extension_properties(pd).map_err(call("vkEnumerateDeviceExtensionProperties"))?,
        )
    };
    let extensions: Vec<String> = ext_props.iter().map(|e| c_string(e.extension_name_as_c_str())).collect();
    let has = |name: &CStr| extensions.iter().any(|e| e.as_bytes() == name.to_bytes());
    let api = props.api_version;
    let v11 = api >= vk::API_VERSION_1_1 && instance_api >= vk::API_VERSION_1_1;
    let v12 = v11 && api >= vk::API_VERSION_1_2;
    let v13 = v11 && api >= vk::API_VERSION_1_3;

    let mut features = Features {
        int16: false,
        int64: false,
        cooperative_matrix: has(ash::khr::cooperative_matrix::NAME) || has(ash::nv::cooperative_matrix::NAME),
        integer_dot_product: v13 || has(ash::khr::shader_integer_dot_product::NAME),
        subgroup_size_control: v13 || has(ash::ext::subgroup_size_control::NAME),
        ..Features::default()
    };
    // SAFETY: as above.
    let base = unsafe { instance.get_physical_device_features(pd) };
    features.int16 = base.shader_int16 == vk::TRUE;
    features.int64 = base.shader_int64 == vk::TRUE;

    let mut subgroup_size = 0;
    let mut subgroup_sizes = (0, 0);
    let mut subgroup_ops = Vec::new();
    let mut subgroup_in_compute = false;
    let mut driver_name = None;
    let mut driver_info = None;
    if v11 {
        let mut f16bit = vk::PhysicalDevice16BitStorageFeatures::default();
        let mut f8bit = vk::PhysicalDevice8BitStorageFeatures::default();
        let mut f16i8 = vk::PhysicalDeviceShaderFloat16Int8Features::default();
        let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut f16bit);
        let with_8bit = v12 || has(ash::khr::_8bit_storage::NAME);
        let with_f16i8 = v12 || has(ash::khr::shader_float16_int8::NAME);
        if with_8bit {
            f2 = f2.push_next(&mut f8bit);
        }
        if with_f16i8 {
            f2 = f2.push_next(&mut f16i8);
        }
        let mut memory_model = vk::PhysicalDeviceVulkanMemoryModelFeatures::default();
        if v12 || has(ash::khr::vulkan_memory_model::NAME) {
            f2 = f2.push_next(&mut memory_model);
        }
        let with_size_control = v13 || has(ash::ext::subgroup_size_control::NAME);
        let mut size_control = vk::PhysicalDeviceSubgroupSizeControlFeatures::default();
        if with_size_control {
            f2 = f2.push_next(&mut size_control);
        }
        let with_coopmat = has(ash::khr::cooperative_matrix::NAME);
        let mut coopmat = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default();
        if with_coopmat {
            f2 = f2.push_next(&mut coopmat);
        }
        // SAFETY: every chained structure is core in the device's version or its extension is
        // offered, and all outlive the call.
        unsafe { instance.get_physical_device_features2(pd, &mut f2) };
        features.storage_16bit = f16bit.storage_buffer16_bit_access == vk::TRUE;
        features.memory_model = memory_model.vulkan_memory_model == vk::TRUE;
        let sizes_controlled =
            size_control.subgroup_size_control == vk::TRUE && size_control.compute_full_subgroups == vk::TRUE;
        let coopmat_on = coopmat.cooperative_matrix == vk::TRUE;
        features.storage_8bit = f8bit.storage_buffer8_bit_access == vk::TRUE;
        features.float16 = f16i8.shader_float16 == vk::TRUE;
        features.int8 = f16i8.shader_int8 == vk::TRUE;

        let mut subgroup = vk::PhysicalDeviceSubgroupProperties::default();
        let mut driver = vk::PhysicalDeviceDriverProperties::default();
        let with_driver = v12 || has(ash::khr::driver_properties::NAME);
        let mut p2 = vk::PhysicalDeviceProperties2::default().push_next(&mut subgroup);
        if with_driver {
            p2 = p2.push_next(&mut driver);
        }
        let mut size_props = vk::PhysicalDeviceSubgroupSizeControlProperties::default();
        if with_size_control {
            p2 = p2.push_next(&mut size_props);
        }
        // SAFETY: as for the features.
        unsafe { instance.get_physical_device_properties2(pd, &mut p2) };
        features.full_subgroups =
            sizes_controlled && size_props.required_subgroup_size_stages.contains(vk::ShaderStageFlags::COMPUTE);
        subgroup_sizes = if with_size_control && size_props.min_subgroup_size > 0 {
            (size_props.min_subgroup_size, size_props.max_subgroup_size)
        } else {
            (subgroup.subgroup_size, subgroup.subgroup_size)
        };
        if coopmat_on {
            features.coopmat_f16_shapes = f16_coopmat_shapes(entry, instance, pd)?;
        }
        subgroup_size = subgroup.subgroup_size;
        subgroup_in_compute = subgroup.supported_stages.contains(vk::ShaderStageFlags::COMPUTE);
        subgroup_ops =
            SUBGROUP_OPS.iter().filter(|(f, _)| subgroup.supported_operations.contains(*f)).map(|&(_, n)| n).collect();
        if with_driver {
            driver_name = Some(c_string(driver.driver_name_as_c_str()));
            driver_info = Some(c_string(driver.driver_info_as_c_str()));
        }
    }

    let has_type = |h: usize, flags: vk::MemoryPropertyFlags| {
        mem.memory_types[..mem.memory_type_count as usize]
            .iter()
            .any(|t| t.heap_index as usize == h && t.property_flags.contains(flags))
    };
    let heaps: Vec<Heap> = (0..mem.memory_heap_count as usize)
        .map(|h| Heap {
            size: mem.memory_heaps[h].size,
            device_local: mem.memory_heaps[h].flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL),
            host_visible: has_type(h, vk::MemoryPropertyFlags::HOST_VISIBLE),
            host_cached: has_type(h, vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_CACHED),
        })
        .collect();
    let kind = DeviceKind::from_vk(props.device_type);
    let unified_flags = vk::MemoryPropertyFlags::DEVICE_LOCAL
        | vk::MemoryPropertyFlags::HOST_VISIBLE
        | vk::MemoryPropertyFlags::HOST_COHERENT;
    let unified_memory = matches!(kind, DeviceKind::Integrated | DeviceKind::Cpu)
        && mem.memory_types[..mem.memory_type_count as usize].iter().any(|t| t.property_flags.contains(unified_flags));
    let compute_queue_family = pick_queue_family(&families);
    let timestamp_bits =
        compute_queue_family.and_then(|q| families.get(q as usize)).map_or(0, |f| f.timestamp_valid_bits);
    let limits = &props.limits;
    Ok(DeviceInfo {
        index,
        handle: pd,
        name: c_string(props.device_name_as_c_str()),
        kind,
        vendor_id: props.vendor_id,
        device_id: props.device_id,
        api_version: version_tuple(api),
        driver_name,
        driver_info,
        driver_version: decode_driver_version(props.vendor_id, props.driver_version),
        pipeline_cache_uuid: props.pipeline_cache_uuid,
        heaps,
        unified_memory,
        subgroup_size,
        subgroup_sizes,
        subgroup_ops,
        subgroup_in_compute,
        max_shared_memory: limits.max_compute_shared_memory_size,
        max_workgroup_invocations: limits.max_compute_work_group_invocations,
        max_workgroup_count: limits.max_compute_work_group_count,
        max_push_constants: limits.max_push_constants_size,
        max_storage_buffer_range: limits.max_storage_buffer_range,
        min_storage_buffer_offset_alignment: limits.min_storage_buffer_offset_alignment,
        features,
        compute_queue_family,
        timestamp_bits,
        timestamp_period: limits.timestamp_period,
        extensions,
    })
}

/// The shapes of f16 x f16 -> f32 products at subgroup scope the device lists (without
/// saturating accumulation, which only integer types have).
fn f16_coopmat_shapes(entry: &ash::Entry, instance: &ash::Instance, pd: vk::PhysicalDevice) -> Result<Vec<CoopShape>> {
    let ext = ash::khr::cooperative_matrix::Instance::new(entry, instance);
    // SAFETY: the extension is offered by `pd`, which belongs to this live instance.
    let props = unsafe { ext.get_physical_device_cooperative_matrix_properties(pd) }
        .map_err(call("vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR"))?;
    let mut shapes = Vec::new();
    for p in props.iter().filter(|p| {
        (p.a_type, p.b_type) == (vk::ComponentTypeKHR::FLOAT16, vk::ComponentTypeKHR::FLOAT16)
            && (p.c_type, p.result_type) == (vk::ComponentTypeKHR::FLOAT32, vk::ComponentTypeKHR::FLOAT32)
            && p.scope == vk::ScopeKHR::SUBGROUP
            && p.saturating_accumulation == vk::FALSE
    }) {
        let shape = CoopShape { m: p.m_size, n: p.n_size, k: p.k_size };
        if !shapes.contains(&shape) {
            shapes.push(shape);
        }
    }
    Ok(shapes)
}

/// A compute-capable family, preferring one without graphics (a dedicated compute queue).
fn pick_queue_family(families: &[vk::QueueFamilyProperties]) -> Option<u32> {
    let compute = |f: &vk::QueueFamilyProperties| f.queue_count > 0 && f.queue_flags.contains(vk::QueueFlags::COMPUTE);
    let dedicated = families.iter().position(|f| compute(f) && !f.queue_flags.contains(vk::QueueFlags::GRAPHICS));
    dedicated.or_else(|| families.iter().position(compute)).map(|i| i as u32)
}

/// A device that exists only in tests: every limit ordinary, no optional feature.
#[cfg(test)]
impl DeviceInfo {
    pub(crate) fn fake(index: usize, kind: DeviceKind) -> DeviceInfo {
        DeviceInfo {
            index,
            handle: vk::PhysicalDevice::null(),
            name: format!("dev{index}"),
            kind,
            vendor_id: 0,
            device_id: 0,
            api_version: (1, 3, 0),
            driver_name: None,
            driver_info: None,
            driver_version: String::new(),
            pipeline_cache_uuid: [0; 16],
            heaps: vec![],
            unified_memory: false,
            subgroup_size: 32,
            subgroup_sizes: (32, 32),
            subgroup_ops: vec![],
            subgroup_in_compute: false,
            max_shared_memory: 32768,
            max_workgroup_invocations: 1024,
            max_workgroup_count: [65535; 3],
            max_push_constants: 128,
            max_storage_buffer_range: u32::MAX,
            min_storage_buffer_offset_alignment: 16,
            features: Features::default(),
            compute_queue_family: Some(0),
            timestamp_bits: 64,
            timestamp_period: 1.0,
            extensions: vec![],
        }
    }

    /// An RDNA-like device (RADV on Strix Halo): subgroups of 64 by default, 32 to 64 a pipeline
    /// may require, 64 KiB of shared memory, 16 x 16 x 16 f16 matrices.
    pub(crate) fn rdna(subgroup: u32) -> DeviceInfo {
        let features = Features {
            coopmat_f16_shapes: vec![CoopShape { m: 16, n: 16, k: 16 }],
            float16: true,
            memory_model: true,
            full_subgroups: true,
            cooperative_matrix: true,
            subgroup_size_control: true,
            ..Features::default()
        };
        DeviceInfo {
            kind: DeviceKind::Integrated,
            vendor_id: 0x1002,
            unified_memory: true,
            subgroup_size: subgroup,
            subgroup_sizes: (32, 64),
            subgroup_ops: vec![
                "basic",
                "vote",
                "arithmetic",
                "ballot",
                "shuffle",
                "shuffle_relative",
                "clustered",
                "quad",
            ],
            subgroup_in_compute: true,
            max_shared_memory: 65536,
            features,
            ..DeviceInfo::fake(0, DeviceKind::Integrated)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coopmat_needs_every_feature_it_uses() {
        let sixteen = CoopShape { m: 16, n: 16, k: 16 };
        let features = Features {
            coopmat_f16_shapes: vec![CoopShape { m: 16, n: 8, k: 16 }, sixteen],
            float16: true,
            memory_model: true,
            full_subgroups: true,
            ..Features::default()
        };
        let ok = DeviceInfo {
            subgroup_in_compute: true,
            max_shared_memory: 49152,
            features,
            ..DeviceInfo::fake(0, DeviceKind::Discrete)
        };
        assert_eq!(ok.coopmat_matmul(), Some(CoopMat { subgroup: 32, shape: sixteen }));
        let without = |f: fn(&mut DeviceInfo)| {
            let mut d = ok.clone();
            f(&mut d);
            d.coopmat_matmul()
        };
        assert_eq!(without(|d| d.features.memory_model = false), None);
        assert_eq!(without(|d| d.features.full_subgroups = false), None);
        assert_eq!(without(|d| d.features.float16 = false), None);
        assert_eq!(without(|d| d.features.coopmat_f16_shapes.clear()), None);
        assert_eq!(without(|d| d.api_version = (1, 2, 0)), None);
        assert_eq!(
            without(|d| {
                d.subgroup_size = 128;
                d.subgroup_sizes = (128, 128);
            }),
            None
        );
        assert_eq!(without(|d| d.max_workgroup_invocations = 64), None, "four subgroups of 32");
        // 45 KiB for 128 x 128 tiles of 16 x 16 x 16; 16 x 8 x 16's 128 x 64 tiles take 32.5.
        assert_eq!(without(|d| d.max_shared_memory = 40960).map(|c| c.shape), Some(CoopShape { m: 16, n: 8, k: 16 }));
        assert_eq!(without(|d| d.max_shared_memory = 32768), None);
    }

    #[test]
    fn rdna_takes_cooperative_matrices_at_a_subgroup_size_whose_tiles_fit() {
        let sixteen = CoopShape { m: 16, n: 16, k: 16 };
        // Subgroups of 64 would take 128 x 128 tiles (77 KiB): the pipelines require 32.
        let wave64 = DeviceInfo::rdna(64);
        assert_eq!(wave64.coopmat_matmul(), Some(CoopMat { subgroup: 32, shape: sixteen }));
        // RADV_PERFTEST=cswave32 makes 32 the default: the same variant.
        assert_eq!(DeviceInfo::rdna(32).coopmat_matmul(), Some(CoopMat { subgroup: 32, shape: sixteen }));
        // Without a size the pipeline may require that fits, none.
        let only64 = DeviceInfo { subgroup_sizes: (64, 64), ..DeviceInfo::rdna(64) };
        assert_eq!(only64.coopmat_matmul(), None);
        // With the shared memory for 64's tiles, still 32: no test has run them at 64.
        let big = DeviceInfo { max_shared_memory: 98304, ..DeviceInfo::rdna(64) };
        assert_eq!(big.coopmat_matmul(), Some(CoopMat { subgroup: 32, shape: sixteen }));
        // The subgroup kernels require 32 too, the size they ran at on NVIDIA.
        assert_eq!(wave64.subgroup_kernels(), Some(32));
        assert_eq!(DeviceInfo::rdna(32).subgroup_kernels(), Some(32));
    }

    #[test]
    fn subgroup_kernels_run_only_at_sizes_a_test_ran() {
        let with = |default: u32, sizes: (u32, u32), pins: bool| {
            let mut d = DeviceInfo { subgroup_size: default, subgroup_sizes: sizes, ..DeviceInfo::rdna(default) };
            d.features.full_subgroups = pins;
            d.subgroup_kernels()
        };
        // Wave64 only (no size control, or a range without 32): no subgroup kernel.
        assert_eq!(with(64, (64, 64), true), None);
        assert_eq!(with(64, (32, 64), false), None);
        assert_eq!(with(128, (64, 128), true), None);
        // lavapipe's widths: the default, the one size there is.
        for lanes in [4, 8, 16] {
            assert_eq!(with(lanes, (lanes, lanes), true), Some(lanes));
        }
        // 32 wherever a pipeline may require it, over a tested default (Intel's 8..32).
        assert_eq!(with(16, (8, 32), true), Some(32));
        assert_eq!(with(16, (8, 16), true), Some(16));
        assert_eq!(with(32, (32, 32), false), Some(32));
        // No subgroup arithmetic in compute shaders: none.
        let mut none = DeviceInfo::rdna(64);
        none.subgroup_in_compute = false;
        assert_eq!(none.subgroup_kernels(), None);
    }

    #[test]
    fn nvidia_driver_versions_decode_their_own_way() {
        // 580.159.4 as NVIDIA packs it.
        let v = (580 << 22) | (159 << 14) | (4 << 6);
        assert_eq!(decode_driver_version(0x10DE, v), "580.159.4.0");
        assert_eq!(decode_driver_version(0x10005, vk::make_api_version(0, 22, 3, 6)), "22.3.6");
    }

    #[test]
    fn prefers_a_dedicated_compute_queue() {
        let fam = |flags| vk::QueueFamilyProperties { queue_flags: flags, queue_count: 1, ..Default::default() };
        let gfx = fam(vk::QueueFlags::GRAPHICS | vk::QueueFlags::COMPUTE | vk::QueueFlags::TRANSFER);
        let comp = fam(vk::QueueFlags::COMPUTE | vk::QueueFlags::TRANSFER);
        assert_eq!(pick_queue_family(&[gfx, comp]), Some(1));
        assert_eq!(pick_queue_family(&[gfx]), Some(0));
        assert_eq!(pick_queue_family(&[fam(vk::QueueFlags::TRANSFER)]), None);
    }
}
