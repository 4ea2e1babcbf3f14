//! Executors of a plan. Kernels know nothing of the model.

pub mod cpu;
pub mod vulkan;
