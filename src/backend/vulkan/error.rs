//! Every way the Vulkan backend can fail, typed, each with the context a user needs.

use ash::vk;
use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub enum VkError {
    /// The Vulkan loader (libvulkan.so.1) could not be loaded.
    NoLoader(String),
    /// The loader works but reports no device (no driver installed, or none usable).
    NoDevice,
    /// A chosen device index names no usable device.
    BadSelection { value: String, reason: String },
    /// The device lacks something hrx needs (a compute queue, Vulkan 1.1, ...).
    Unsupported { device: String, what: String },
    /// Device or host memory ran out.
    OutOfMemory { what: String, bytes: u64 },
    /// No memory type has the properties a buffer needs.
    NoMemoryType { what: String },
    /// The device was lost (driver reset, hang, crash): nothing on it can be used any more.
    DeviceLost { during: String },
    /// A fence wait ran past its limit (`DeviceOptions::submit_timeout`); the device is hung
    /// from then on.
    Timeout { during: String, seconds: f64 },
    /// A submission timed out earlier and may still be running: nothing more is submitted to
    /// the device, and its mapped memory is not touched.
    Hung { seconds: f64 },
    /// A compute pipeline could not be made from its SPIR-V.
    Pipeline { kernel: String, reason: String },
    /// No kernel of this backend runs the op on these operands (or none that passed the
    /// self-check here): the node is left to the CPU.
    NoKernel(String),
    /// A kernel does not take these operands (dtype, shape, strides, alignment, sizes past
    /// what its push constants hold).
    Operands(String),
    /// A plan this executor cannot bind or run (a value with no address, a kernel it does not
    /// have, a window past a buffer's binding).
    Plan(String),
    /// A command buffer or descriptor pool used out of order (recording twice, a dispatch
    /// outside a recording, a full pool).
    Recording(String),
    /// Arguments that do not fit a pipeline, a descriptor set or the device's limits (push
    /// constants of another size, a window past its buffer or the storage-buffer range, more
    /// workgroups than the device runs).
    Binding(String),
    /// A read or write past a buffer's end.
    OutOfBounds(String),
    /// A helper thread (making pipelines) panicked.
    Thread(String),
    /// Any other Vulkan call that failed.
    Call { call: &'static str, result: vk::Result },
}

pub type Result<T> = std::result::Result<T, VkError>;

impl VkError {
    /// Maps a failed call's result: memory and device-loss results get their own variants.
    pub fn from_call(call: &'static str, result: vk::Result) -> VkError {
        match result {
            vk::Result::ERROR_OUT_OF_DEVICE_MEMORY => {
                VkError::OutOfMemory { what: format!("{call} (device memory)"), bytes: 0 }
            }
            vk::Result::ERROR_OUT_OF_HOST_MEMORY => {
                VkError::OutOfMemory { what: format!("{call} (host memory)"), bytes: 0 }
            }
            vk::Result::ERROR_DEVICE_LOST => VkError::DeviceLost { during: call.to_owned() },
            result => VkError::Call { call, result },
        }
    }
}

/// `.map_err(call("vkFoo"))`
pub fn call(name: &'static str) -> impl Fn(vk::Result) -> VkError {
    move |r| VkError::from_call(name, r)
}

impl fmt::Display for VkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VkError::NoLoader(e) => write!(
                f,
                "no Vulkan loader: {e} (install libvulkan1 and a driver, e.g. mesa-vulkan-drivers or the GPU vendor's)"
            ),
            VkError::NoDevice => {
                f.write_str("the Vulkan loader found no device (is a Vulkan driver installed? see `hrx doctor`)")
            }
            VkError::BadSelection { value, reason } => write!(f, "Vulkan device {value}: {reason}"),
            VkError::Unsupported { device, what } => write!(f, "{device}: {what}"),
            VkError::OutOfMemory { what, bytes } if *bytes > 0 => {
                write!(f, "out of memory allocating {bytes} bytes for {what}")
            }
            VkError::OutOfMemory { what, .. } => write!(f, "out of memory: {what}"),
            VkError::NoMemoryType { what } => write!(f, "no Vulkan memory type suits {what}"),
            VkError::DeviceLost { during } => write!(f, "the Vulkan device was lost during {during}"),
            VkError::Timeout { during, seconds } => write!(
                f,
                "the GPU did not finish {during} within {seconds} s (HRX_VK_TIMEOUT=SECONDS sets the limit)"
            ),
            VkError::Hung { seconds } => write!(
                f,
                "the Vulkan device is unusable: an earlier submission did not finish within {seconds} s and may still be running"
            ),
            VkError::Pipeline { kernel, reason } => write!(f, "cannot create compute pipeline {kernel}: {reason}"),
            VkError::NoKernel(m)
            | VkError::Operands(m)
            | VkError::Plan(m)
            | VkError::Recording(m)
            | VkError::Binding(m)
            | VkError::OutOfBounds(m)
            | VkError::Thread(m) => f.write_str(m),
            VkError::Call { call, result } => write!(f, "{call} failed: {result}"),
        }
    }
}

impl std::error::Error for VkError {}
