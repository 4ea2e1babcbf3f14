//! The Vulkan backend: device, memory, pipelines, command buffers, and the kernels that run
//! graph nodes on the GPU. The system's Vulkan loader is loaded at run time, so hrx starts
//! (and falls back to the CPU) on machines without one. All of the backend's `unsafe` code is
//! in this module, each block with its `SAFETY:` reasoning.
//!
//! The portable shaders (shaders/, GLSL 450, SPIR-V 1.0) use no optional feature: weights are
//! read as `uint[]` and decoded from byte offsets, reductions go through shared memory; they
//! run on lavapipe (CI) and anything Vulkan 1.0 or later. Devices that offer more get variants
//! ([`kernels::Variants`]): subgroup matrix-vector products (Vulkan 1.1 subgroup arithmetic)
//! and matrix-matrix products and attention on cooperative matrices (Vulkan 1.3, f16 operands;
//! f32-exact products with HRX_VK_EXACT=1; HRX_VK_NO_COOPMAT=1 keeps the f32 tiles).
//!
//! - [`Instance`], [`DeviceInfo`]: the loader and what each device offers (`hrx doctor`).
//! - [`Device`]: an open device, its compute queue, memory and pipeline cache (which device is
//!   `backend::DeviceChoice`'s business).
//! - [`Buffer`], [`Pipeline`], [`DescriptorPool`], [`CommandBuffer`]: the objects a plan is
//!   recorded with; each holds what it needs alive.
//! - [`shaders`]: the kernel table (shaders/modules.txt) and the embedded SPIR-V;
//!   [`kernels`]: kernels by op, their push constants and grids, and the device's variants;
//!   [`VulkanRegistry`]: what each graph node runs, decided at plan time;
//!   [`VulkanExecutor`]: records exactly that once and replays it.

pub mod bench;
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
pub mod once;
mod pipeline;
mod profile;
mod registry;
mod select;
pub mod selfcheck;
pub mod shaders;
mod timestamps;
pub mod weight_layout;

pub use buffer::{Buffer, Readback};
pub use command::CommandBuffer;
pub use descriptor::{DescriptorPool, DescriptorSet, Window};
pub use device::{Device, DeviceOptions, SUBMIT_TIMEOUT};
pub use error::{Result, VkError};
pub use executor::{RecordingStats, VulkanExecutor};
pub use info::{CoopShape, DeviceInfo, DeviceKind, Features, Heap, TESTED_SUBGROUP_SIZES};
pub use instance::Instance;
pub use memory::Location;
pub use pipeline::{Pipeline, PipelineSpec};
pub use profile::{KernelTime, Profile, RunTimes};
pub use registry::VulkanRegistry;
pub use select::{pick, Selection};
pub use timestamps::TimestampPool;
