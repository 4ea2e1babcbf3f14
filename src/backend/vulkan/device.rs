//! The logical device: chosen physical device, one compute queue, the memory allocator and the
//! pipeline cache. `Device` is a cheap handle; buffers, pipelines and command buffers hold it,
//! so it is destroyed after the last of them.

use super::cache;
use super::error::{call, Result, VkError};
use super::info::{DeviceInfo, DeviceKind};
use super::instance::Instance;
use super::kernels::Variants;
use super::memory::Allocator;
use super::select::{pick, Selection};
use super::selfcheck::Checks;
use crate::settings::{self, settings};
use ash::vk;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// How long a submission may run before hrx reports the GPU as hung, unless
/// `HRX_VK_TIMEOUT=SECONDS` says otherwise (a large image on a CPU implementation such as
/// lavapipe can need more).
pub const SUBMIT_TIMEOUT: Duration = Duration::from_secs(120);

/// How to open a device: where to keep the pipeline cache, memory and profiling.
#[derive(Clone, Debug)]
pub struct DeviceOptions {
    /// None: no pipeline cache on disk.
    pub cache_dir: Option<PathBuf>,
    /// On unified-memory devices, map device buffers and write them in place (true, the
    /// default); false always goes through staging copies (tests use it to exercise them).
    pub map_device_memory: bool,
    /// Time every dispatch with GPU timestamps (`HRX_VK_PROFILE=1`): recordings write them
    /// and executors add them up per kernel. Off where the device cannot time (a warning).
    pub profile: bool,
    /// How long a submission may run; past it the device is hung ([`VkError::Timeout`], then
    /// [`VkError::Hung`] for everything after).
    pub submit_timeout: Duration,
    /// How long a wait for a submission polls its fence before it sleeps in the driver
    /// (`HRX_VK_SPIN_US`, default `SPIN`); a CPU device never polls (it would take a core
    /// from the work it waits for).
    pub spin: Duration,
    /// Run hrx's self-check before a model's plans first run here (`selfcheck`; on by default,
    /// `--no-check` turns it off), its record kept in `cache_dir`.
    pub self_check: bool,
}

/// How long a wait polls by default: a decode step, a prefill chunk or an image's encode on a
/// GPU. Sleeping in vkWaitForFences instead cost each run of a recording ~0.1 ms to wake on the
/// H100 (the 2B shape's decode step: 2.20 ms from submission to wake against 2.05 ms of GPU
/// time; polling: 2.10 ms, tg128 469.6 against 444.9 tokens/s in one call).
pub const SPIN: Duration = Duration::from_millis(50);

impl DeviceOptions {
    /// `HRX_CACHE_DIR` (else `$XDG_CACHE_HOME/hrx`, `~/.cache/hrx`) for the cache;
    /// `HRX_CACHE_DIR=` (empty) turns the disk cache off; `HRX_VK_PROFILE=1` for GPU
    /// timestamps; `HRX_VK_TIMEOUT=SECONDS` for the submission limit (a malformed value is
    /// warned about and the default kept). (Which device is `backend::DeviceChoice`'s business.)
    pub fn from_env() -> DeviceOptions {
        let set = settings();
        let cache_dir = match set.text(&settings::CACHE_DIR) {
            Some("") => None,
            Some(d) => Some(PathBuf::from(d)),
            None => cache::default_dir(),
        };
        let profile = set.switch(&settings::VK_PROFILE);
        let submit_timeout = set.seconds(&settings::VK_TIMEOUT).map_or(SUBMIT_TIMEOUT, Duration::from_secs_f64);
        let spin = set.whole(&settings::VK_SPIN_US).map_or(SPIN, Duration::from_micros);
        DeviceOptions { cache_dir, map_device_memory: true, profile, submit_timeout, spin, self_check: true }
    }
}

/// Everything the handles share; destroyed when the last handle goes.
pub(crate) struct Shared {
    pub raw: ash::Device,
    pub info: DeviceInfo,
    pub queue_family: u32,
    pub memory_props: vk::PhysicalDeviceMemoryProperties,
    /// Device buffers live in host-mapped memory (unified memory, and the options allow it).
    pub map_device_memory: bool,
    /// Recordings time their dispatches (asked for, and the device can).
    pub profile: bool,
    /// Pipelines are made with their statistics captured and logged (profiling, where the
    /// device has VK_KHR_pipeline_executable_properties).
    pub statistics: Option<ash::khr::pipeline_executable_properties::Device>,
    queue: Mutex<vk::Queue>,
    allocator: Mutex<Allocator>,
    pub pipeline_cache: vk::PipelineCache,
    cache_path: Option<PathBuf>,
    submit_timeout: Duration,
    /// How long a wait polls before it sleeps (zero on a CPU device).
    spin: Duration,
    /// A submission ran past `submit_timeout` and may still be running: nothing is submitted
    /// after it, and mapped memory, which it may be reading or writing, is not touched.
    hung: AtomicBool,
    /// The device was lost (`VK_ERROR_DEVICE_LOST`, or a test's fault): nothing more runs on it.
    lost: AtomicBool,
    /// What hrx's self-check found here.
    pub checks: Checks,
    // Last: destroyed after the device (fields drop after `Drop::drop`, in order).
    _instance: Instance,
}

/// An open Vulkan device.
#[derive(Clone)]
pub struct Device {
    pub(crate) shared: Arc<Shared>,
}

impl Device {
    /// Opens the device `selection` names (see `select.rs`).
    pub fn new(selection: &Selection, options: &DeviceOptions) -> Result<Device> {
        let instance = Instance::new()?;
        let devices = instance.devices()?;
        let info = devices[pick(&devices, selection)?].clone();
        Device::open(instance, info, options)
    }

    /// Opens device `info`, one of `instance`'s.
    pub fn open(instance: Instance, mut info: DeviceInfo, options: &DeviceOptions) -> Result<Device> {
        let queue_family = info
            .compute_queue_family
            .ok_or_else(|| VkError::Unsupported { device: info.name.clone(), what: "no compute queue".into() })?;
        let priorities = [1.0f32];
        let queues =
            [vk::DeviceQueueCreateInfo::default().queue_family_index(queue_family).queue_priorities(&priorities)];
        // A device offering VK_KHR_portability_subset requires it enabled.
        let mut extensions = Vec::new();
        let portability = ash::khr::portability_subset::NAME;
        if info.has_extension(&portability.to_string_lossy()) {
            extensions.push(portability.as_ptr());
        }
        // The cooperative-matrix products need their extension and four features enabled (all
        // checked as offered by `coopmat_matmul`); every kernel built around a subgroup size
        // requires it where the device can (`pins_subgroups`), which takes size control and
        // full subgroups: Vulkan 1.3's features, or VK_EXT_subgroup_size_control's before it.
        let coopmat = info.coopmat_matmul().is_some();
        if coopmat {
            extensions.push(ash::khr::cooperative_matrix::NAME.as_ptr());
        }
        let pins = info.pins_subgroups();
        let core_13 = info.api_version >= (1, 3, 0);
        if pins && !core_13 {
            extensions.push(ash::ext::subgroup_size_control::NAME.as_ptr());
        }
        let mut coopmat_features = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default().cooperative_matrix(true);
        let mut v12 = vk::PhysicalDeviceVulkan12Features::default().shader_float16(true).vulkan_memory_model(true);
        let mut v13 =
            vk::PhysicalDeviceVulkan13Features::default().subgroup_size_control(pins).compute_full_subgroups(pins);
        let mut size_control = vk::PhysicalDeviceSubgroupSizeControlFeatures::default()
            .subgroup_size_control(true)
            .compute_full_subgroups(true);
        // Profiling also asks the driver for each pipeline's statistics (registers, spills,
        // shared memory: its own names), where it offers them.
        let statistics =
            options.profile && info.has_extension(&ash::khr::pipeline_executable_properties::NAME.to_string_lossy());
        if statistics {
            extensions.push(ash::khr::pipeline_executable_properties::NAME.as_ptr());
        }
        let mut statistics_features =
            vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default().pipeline_executable_info(true);
        let mut create =
            vk::DeviceCreateInfo::default().queue_create_infos(&queues).enabled_extension_names(&extensions);
        if statistics {
            create = create.push_next(&mut statistics_features);
        }
        if coopmat {
            create = create.push_next(&mut coopmat_features).push_next(&mut v12);
        }
        if pins && core_13 || coopmat {
            create = create.push_next(&mut v13);
        } else if pins {
            create = create.push_next(&mut size_control);
        }
        if !coopmat {
            // Kernel choice reads the device's info: without the features enabled, never the
            // cooperative-matrix kernels.
            info.features.coopmat_f16_shapes.clear();
        }
        // SAFETY: the physical device belongs to `instance`; the create info outlives the call.
        let raw = unsafe { instance.raw.create_device(info.handle, &create, None) }.map_err(call("vkCreateDevice"))?;
        // SAFETY: family and index 0 were requested above.
        let queue = unsafe { raw.get_device_queue(queue_family, 0) };
        // SAFETY: a query on a live physical device.
        let memory_props = unsafe { instance.raw.get_physical_device_memory_properties(info.handle) };
        let cache_path = options.cache_dir.as_ref().map(|d| cache::file_for(d, &info));
        let initial = cache_path.as_ref().map(|p| cache::load(p, &info)).unwrap_or_default();
        let pipeline_cache = match create_pipeline_cache(&raw, &initial) {
            Ok(c) => c,
            Err(e) if !initial.is_empty() => {
                log::warn!("the driver refused the pipeline cache ({e}); starting empty");
                create_pipeline_cache(&raw, &[])?
            }
            Err(e) => {
                // SAFETY: nothing was made from the device yet.
                unsafe { raw.destroy_device(None) };
                return Err(e);
            }
        };
        let map_device_memory = options.map_device_memory && info.unified_memory;
        let profile = options.profile && info.can_time();
        if options.profile && !profile {
            log::warn!(
                "HRX_VK_PROFILE=1: {} cannot time dispatches (timestamps on its compute queue: {} valid bits, {} ns per tick); profiling is off",
                info.name,
                info.timestamp_bits,
                info.timestamp_period
            );
        }
        let largest_heap = info.heaps.iter().map(|h| h.size).max().unwrap_or(0);
        let statistics = statistics.then(|| ash::khr::pipeline_executable_properties::Device::new(&instance.raw, &raw));
        let spin = if info.kind == DeviceKind::Cpu { Duration::ZERO } else { options.spin };
        let checks = Checks::new(&info, options.self_check, options.cache_dir.as_deref());
        let shared = Shared {
            statistics,
            raw,
            info,
            queue_family,
            memory_props,
            map_device_memory,
            profile,
            queue: Mutex::new(queue),
            allocator: Mutex::new(Allocator::new(largest_heap)),
            pipeline_cache,
            cache_path,
            submit_timeout: options.submit_timeout,
            spin,
            hung: AtomicBool::new(false),
            lost: AtomicBool::new(false),
            checks,
            _instance: instance,
        };
        log::info!(
            "vulkan device: {} ({}){}",
            shared.info.name,
            shared.info.kind.name(),
            if coopmat { ", cooperative matrices" } else { "" }
        );
        Ok(Device { shared: Arc::new(shared) })
    }

    pub fn info(&self) -> &DeviceInfo {
        &self.shared.info
    }

    /// The kernel variants hrx runs here: `Variants::for_device`, less what the self-check
    /// found broken on it.
    pub fn variants(&self) -> Variants {
        self.shared.checks.apply(Variants::for_device(&self.shared.info))
    }

    /// Whether hrx's self-check runs here before a model's plans do.
    pub fn checks_kernels(&self) -> bool {
        self.shared.checks.enabled()
    }

    /// Forgets what the self-check found here, so that all of it runs again
    /// (`hrx doctor --check`).
    pub fn forget_checks(&self) {
        self.shared.checks.forget();
    }

    /// What the self-check found broken here, a line each.
    pub fn check_failures(&self) -> Vec<String> {
        self.shared.checks.failures()
    }

    /// Whether the device was lost or hung: every submission fails from then on.
    pub fn is_lost(&self) -> bool {
        self.shared.usable().is_err()
    }

    /// Marks the device lost, as `VK_ERROR_DEVICE_LOST` does: every later submission fails.
    pub(crate) fn lose(&self) {
        self.shared.lost.store(true, Ordering::Release);
    }

    /// Whether recordings time their dispatches (`DeviceOptions::profile` on a device that
    /// can).
    pub fn profiling(&self) -> bool {
        self.shared.profile
    }

    /// Writes the pipeline cache to disk now (it is also written when the device closes).
    pub fn save_pipeline_cache(&self) {
        self.shared.save_pipeline_cache();
    }

    /// Memory objects asked of the driver since the device was opened.
    pub fn driver_allocations(&self) -> usize {
        self.shared.allocator().driver_allocations
    }

    /// Where the pipeline cache is kept, if anywhere.
    pub fn pipeline_cache_path(&self) -> Option<&std::path::Path> {
        self.shared.cache_path.as_deref()
    }
}

fn create_pipeline_cache(raw: &ash::Device, initial: &[u8]) -> Result<vk::PipelineCache> {
    let info = vk::PipelineCacheCreateInfo::default().initial_data(initial);
    // SAFETY: `initial` was checked against this device's cache header (cache.rs).
    unsafe { raw.create_pipeline_cache(&info, None) }.map_err(call("vkCreatePipelineCache"))
}

impl Shared {
    pub fn allocator(&self) -> MutexGuard<'_, Allocator> {
        // A panic while holding the lock leaves the allocator consistent (no partial updates
        // across an unwind point), so a poisoned lock is still usable.
        self.allocator.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the device can still be used: not after a submission timed out, nor once it
    /// was lost.
    pub fn usable(&self) -> Result<()> {
        if self.lost.load(Ordering::Acquire) {
            return Err(VkError::DeviceLost { during: "an earlier submission (the device is gone)".into() });
        }
        match self.hung.load(Ordering::Acquire) {
            true => Err(VkError::Hung { seconds: self.submit_timeout.as_secs_f64() }),
            false => Ok(()),
        }
    }

    /// Submits `cmd` and waits for it, at most the submission timeout: past it the device is
    /// hung (see `usable`) and `cmd`'s owner must not destroy it nor what it uses. `fence` is
    /// unsignalled when called, and again on success.
    pub fn submit_and_wait(&self, cmd: vk::CommandBuffer, fence: vk::Fence, what: &str) -> Result<()> {
        // Work queued behind a hung submission would only time out in turn.
        self.usable()?;
        let cmds = [cmd];
        let submit = [vk::SubmitInfo::default().command_buffers(&cmds)];
        {
            let queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
            // SAFETY: the fence is unsignalled (reset below after each wait, created
            // unsignalled) and not in use; the queue is externally synchronised by the lock;
            // `cmd` is fully recorded and its resources are kept alive by its owner.
            unsafe { self.raw.queue_submit(*queue, &submit, fence) }.map_err(call("vkQueueSubmit"))?;
        }
        // Poll first (`spin`); an error or the end of the spin leaves it to the wait below,
        // which returns at once for a signalled fence.
        let polled = std::time::Instant::now();
        while polled.elapsed() < self.spin.min(self.submit_timeout) {
            // SAFETY: the fence belongs to this device.
            if unsafe { self.raw.get_fence_status(fence) } != Ok(false) {
                break;
            }
            std::hint::spin_loop();
        }
        // The limit counts from the submission, the polling included.
        let left = self.submit_timeout.saturating_sub(polled.elapsed());
        let timeout = u64::try_from(left.as_nanos()).unwrap_or(u64::MAX);
        // SAFETY: the fence belongs to this device.
        let waited = unsafe { self.raw.wait_for_fences(&[fence], true, timeout) };
        match waited {
            Ok(()) => {}
            Err(vk::Result::TIMEOUT) => {
                self.hung.store(true, Ordering::Release);
                return Err(VkError::Timeout { during: what.to_owned(), seconds: self.submit_timeout.as_secs_f64() });
            }
            Err(vk::Result::ERROR_DEVICE_LOST) => {
                self.lost.store(true, Ordering::Release);
                return Err(VkError::DeviceLost { during: what.to_owned() });
            }
            Err(e) => return Err(VkError::from_call("vkWaitForFences", e)),
        }
        // SAFETY: the fence is signalled and no longer used by the queue.
        unsafe { self.raw.reset_fences(&[fence]) }.map_err(call("vkResetFences"))
    }

    fn save_pipeline_cache(&self) {
        let Some(path) = &self.cache_path else { return };
        // SAFETY: the cache belongs to this device.
        match unsafe { self.raw.get_pipeline_cache_data(self.pipeline_cache) } {
            Ok(data) => cache::save(path, &data),
            Err(e) => log::warn!("could not read the pipeline cache: {e}"),
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let t0 = std::time::Instant::now();
        self.save_pipeline_cache();
        log::debug!("pipeline cache saved in {:.3} s", t0.elapsed().as_secs_f64());
        // A timed-out submission keeps the device alive for good (its command buffer never lets
        // go of it), so this is not reached then; if it were, the device is left to the driver,
        // which reclaims it at exit: waiting for idle could take as long as the hung work runs.
        if *self.hung.get_mut() {
            return;
        }
        // SAFETY: the last handle is gone, so no buffer, pipeline or command buffer of this
        // device exists and every submission finished; waiting for idle returns at once then,
        // and makes destruction safe after a lost device too.
        unsafe {
            let _ = self.raw.device_wait_idle();
            self.raw.destroy_pipeline_cache(self.pipeline_cache, None);
        }
        self.allocator.get_mut().unwrap_or_else(|p| p.into_inner()).free_all(&self.raw);
        // SAFETY: every child object is destroyed above.
        unsafe { self.raw.destroy_device(None) };
        log::debug!("vulkan device closed in {:.3} s", t0.elapsed().as_secs_f64());
    }
}
