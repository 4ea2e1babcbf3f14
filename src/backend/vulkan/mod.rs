//! The Vulkan backend: device, memory, pipelines, command buffers, and the kernels that run
//! graph nodes on the GPU. The system's Vulkan loader is loaded at run time, so hrx starts
//! (and falls back to the CPU) on machines without one. All of the backend's `unsafe` code is
//! in this module, each block with its `SAFETY:` reasoning.
//!
//! Shaders (shaders/, GLSL 450, SPIR-V 1.0) use no optional feature: weights are read as
//! `uint[]` and decoded from byte offsets, reductions go through shared memory. They run on
//! lavapipe (CI), and anything Vulkan 1.0 or later; faster variants (16-bit storage, subgroup
//! reductions, integer dot products) can be added per device later.
//!
//! - [`Instance`], [`DeviceInfo`]: the loader and what each device offers (`hrx doctor`).
//! - [`Device`]: the chosen device (`HRX_DEVICE`), its compute queue, memory and pipeline cache.
//! - [`Buffer`], [`Pipeline`], [`DescriptorPool`], [`CommandBuffer`]: the objects a plan is
//!   recorded with; each holds what it needs alive.
//! - [`kernels`]: ops, push constants and grids; [`VulkanRegistry`]: which graph nodes run here;
//!   [`VulkanExecutor`]: runs an all-GPU plan recorded once.

mod buffer;
mod cache;
mod command;
mod descriptor;
mod device;
mod error;
mod executor;
mod hazard;
mod info;
mod instance;
pub mod kernels;
mod memory;
mod pipeline;
mod profile;
mod registry;
mod select;
pub mod shaders;
mod timestamps;

pub use buffer::Buffer;
pub use command::CommandBuffer;
pub use descriptor::{DescriptorPool, DescriptorSet, Window};
pub use device::{Device, DeviceOptions};
pub use error::{Result, VkError};
pub use executor::{RecordingStats, VulkanExecutor};
pub use info::{DeviceInfo, DeviceKind, Features, Heap};
pub use instance::Instance;
pub use memory::Location;
pub use pipeline::{Pipeline, PipelineSpec};
pub use profile::{KernelTime, Profile};
pub use registry::VulkanRegistry;
pub use select::{pick, Selection};
pub use timestamps::TimestampPool;
