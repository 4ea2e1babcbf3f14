//! Compute pipelines from SPIR-V: a set layout of N storage buffers (binding i = buffer i),
//! push constants, specialization constants, compiled through the device's pipeline cache.

use super::device::{Device, Shared};
use super::error::{Result, VkError};
use ash::vk;
use std::sync::Arc;

/// What a pipeline is made of.
pub struct PipelineSpec<'a> {
    pub name: &'a str,
    pub spirv: &'a [u8],
    /// Storage buffers at bindings 0..bindings.
    pub bindings: u32,
    /// Bytes of push constants (a multiple of 4).
    pub push_bytes: u32,
    /// Values of specialization constants 0, 1, ... (u32 each).
    pub constants: &'a [u32],
    /// Run with exactly this subgroup size and full subgroups (kernels that split their
    /// workgroup into a fixed number of subgroups); the device must have enabled
    /// subgroupSizeControl and computeFullSubgroups.
    pub subgroup_size: Option<u32>,
}

pub(crate) struct PipelineInner {
    shared: Arc<Shared>,
    pub name: String,
    pub raw: vk::Pipeline,
    pub layout: vk::PipelineLayout,
    pub set_layout: vk::DescriptorSetLayout,
    pub bindings: u32,
    pub push_bytes: u32,
}

/// A compute pipeline (cheap to clone).
#[derive(Clone)]
pub struct Pipeline {
    pub(crate) inner: Arc<PipelineInner>,
}

impl Pipeline {
    pub fn new(device: &Device, spec: &PipelineSpec) -> Result<Pipeline> {
        let shared = &device.shared;
        let fail = |reason: String| VkError::Pipeline { kernel: spec.name.to_owned(), reason };
        if spec.push_bytes > shared.info.max_push_constants || !spec.push_bytes.is_multiple_of(4) {
            return Err(fail(format!(
                "{} bytes of push constants, the device allows {}",
                spec.push_bytes, shared.info.max_push_constants
            )));
        }
        let code =
            ash::util::read_spv(&mut std::io::Cursor::new(spec.spirv)).map_err(|e| fail(format!("bad SPIR-V: {e}")))?;
        let bindings: Vec<_> = (0..spec.bindings)
            .map(|b| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(b)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
            })
            .collect();
        let entries: Vec<_> = (0..spec.constants.len() as u32)
            .map(|i| vk::SpecializationMapEntry { constant_id: i, offset: i * 4, size: 4 })
            .collect();
        let constant_bytes: Vec<u8> = spec.constants.iter().flat_map(|c| c.to_le_bytes()).collect();
        let specialization = vk::SpecializationInfo::default().map_entries(&entries).data(&constant_bytes);
        let ranges =
            [vk::PushConstantRange { stage_flags: vk::ShaderStageFlags::COMPUTE, offset: 0, size: spec.push_bytes }];
        let d = &shared.raw;
        // SAFETY: every create info and what it points to outlives its call; on failure each
        // object made so far is destroyed before returning.
        unsafe {
            let module = d
                .create_shader_module(&vk::ShaderModuleCreateInfo::default().code(&code), None)
                .map_err(|e| fail(format!("shader module: {e}")))?;
            let set_layout = match d
                .create_descriptor_set_layout(&vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings), None)
            {
                Ok(l) => l,
                Err(e) => {
                    d.destroy_shader_module(module, None);
                    return Err(VkError::from_call("vkCreateDescriptorSetLayout", e));
                }
            };
            let set_layouts = [set_layout];
            let mut layout_info = vk::PipelineLayoutCreateInfo::default().set_layouts(&set_layouts);
            if spec.push_bytes > 0 {
                layout_info = layout_info.push_constant_ranges(&ranges);
            }
            let layout = match d.create_pipeline_layout(&layout_info, None) {
                Ok(l) => l,
                Err(e) => {
                    d.destroy_descriptor_set_layout(set_layout, None);
                    d.destroy_shader_module(module, None);
                    return Err(VkError::from_call("vkCreatePipelineLayout", e));
                }
            };
            let mut stage = vk::PipelineShaderStageCreateInfo::default()
                .stage(vk::ShaderStageFlags::COMPUTE)
                .module(module)
                .name(c"main");
            if !spec.constants.is_empty() {
                stage = stage.specialization_info(&specialization);
            }
            let mut required = vk::PipelineShaderStageRequiredSubgroupSizeCreateInfo::default()
                .required_subgroup_size(spec.subgroup_size.unwrap_or(0));
            if spec.subgroup_size.is_some() {
                stage =
                    stage.flags(vk::PipelineShaderStageCreateFlags::REQUIRE_FULL_SUBGROUPS).push_next(&mut required);
            }
            let mut create = vk::ComputePipelineCreateInfo::default().stage(stage).layout(layout);
            if shared.statistics.is_some() {
                create = create.flags(vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR);
            }
            let info = [create];
            let t0 = std::time::Instant::now();
            let created = d.create_compute_pipelines(shared.pipeline_cache, &info, None);
            // Pipeline creation is where a cold start on an empty driver cache goes.
            log::debug!("pipeline {}: created in {:.1} ms", spec.name, t0.elapsed().as_secs_f64() * 1e3);
            d.destroy_shader_module(module, None);
            let raw = match created {
                Ok(p) => p[0],
                Err((_, e)) => {
                    d.destroy_pipeline_layout(layout, None);
                    d.destroy_descriptor_set_layout(set_layout, None);
                    return Err(match VkError::from_call("vkCreateComputePipelines", e) {
                        VkError::Call { result, .. } => fail(format!("{result}")),
                        other => other,
                    });
                }
            };
            if let Some(stats) = &shared.statistics {
                log::info!("pipeline {}: {}", spec.name, statistics(stats, raw));
            }
            Ok(Pipeline {
                inner: Arc::new(PipelineInner {
                    shared: Arc::clone(shared),
                    name: spec.name.to_owned(),
                    raw,
                    layout,
                    set_layout,
                    bindings: spec.bindings,
                    push_bytes: spec.push_bytes,
                }),
            })
        }
    }

    pub fn name(&self) -> &str {
        &self.inner.name
    }
}

/// The driver's statistics of pipeline `raw` (its names and values: registers, spills, ...), as
/// one line.
///
/// # Safety
/// `raw` is a live pipeline of the device `stats` was made for, created with its statistics
/// captured.
unsafe fn statistics(stats: &ash::khr::pipeline_executable_properties::Device, raw: vk::Pipeline) -> String {
    let info = vk::PipelineInfoKHR::default().pipeline(raw);
    // SAFETY: the caller's promise.
    let Ok(executables) = (unsafe { stats.get_pipeline_executable_properties(&info) }) else {
        return "no statistics".into();
    };
    let mut out = Vec::new();
    for index in 0..executables.len() as u32 {
        let exe = vk::PipelineExecutableInfoKHR::default().pipeline(raw).executable_index(index);
        // SAFETY: as above; index is below the count the driver gave.
        let Ok(list) = (unsafe { stats.get_pipeline_executable_statistics(&exe) }) else { continue };
        for s in list {
            let name = s.name_as_c_str().map(|c| c.to_string_lossy().into_owned()).unwrap_or_default();
            // SAFETY: `format` says which member of the union the driver wrote.
            let value = unsafe {
                match s.format {
                    vk::PipelineExecutableStatisticFormatKHR::BOOL32 => (s.value.b32 != 0).to_string(),
                    vk::PipelineExecutableStatisticFormatKHR::INT64 => s.value.i64.to_string(),
                    vk::PipelineExecutableStatisticFormatKHR::UINT64 => s.value.u64.to_string(),
                    vk::PipelineExecutableStatisticFormatKHR::FLOAT64 => format!("{:.3}", s.value.f64),
                    _ => "?".into(),
                }
            };
            out.push(format!("{name}={value}"));
        }
    }
    out.join(", ")
}

impl Drop for PipelineInner {
    fn drop(&mut self) {
        // SAFETY: the last handle is gone; command buffers and descriptor sets that used the
        // pipeline hold handles, so none of them is alive either.
        unsafe {
            self.shared.raw.destroy_pipeline(self.raw, None);
            self.shared.raw.destroy_pipeline_layout(self.layout, None);
            self.shared.raw.destroy_descriptor_set_layout(self.set_layout, None);
        }
    }
}
