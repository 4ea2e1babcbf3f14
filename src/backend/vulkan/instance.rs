//! The Vulkan loader, loaded at run time (a binary without libvulkan still starts), and an
//! instance to enumerate devices with.

use super::error::{call, Result, VkError};
use super::info::{self, DeviceInfo};
use ash::vk;

/// A loaded loader and a Vulkan instance; destroyed on drop.
pub struct Instance {
    // The entry must outlive the instance: it holds the loader library.
    entry: ash::Entry,
    pub(crate) raw: ash::Instance,
    /// The instance's Vulkan version (at most 1.3).
    pub(crate) api_version: u32,
    /// The loader's own version.
    loader_version: u32,
}

impl Instance {
    /// Loads libvulkan and creates an instance (no layers, no window-system extensions).
    pub fn new() -> Result<Instance> {
        // SAFETY: loading the system loader runs its initialisers; it is the library every
        // Vulkan program loads, and nothing else in this process calls into it concurrently
        // with its loading.
        let entry = unsafe { ash::Entry::load() }.map_err(|e| VkError::NoLoader(e.to_string()))?;
        // SAFETY: a global command of a successfully loaded loader.
        let loader_version = match unsafe { entry.try_enumerate_instance_version() } {
            Ok(Some(v)) => v,
            Ok(None) => vk::API_VERSION_1_0,
            Err(e) => return Err(VkError::from_call("vkEnumerateInstanceVersion", e)),
        };
        let api_version = loader_version.min(vk::API_VERSION_1_3);
        // SAFETY: as above.
        let available = unsafe { entry.enumerate_instance_extension_properties(None) }
            .map_err(call("vkEnumerateInstanceExtensionProperties"))?;
        let portability = ash::khr::portability_enumeration::NAME;
        let has_portability = available.iter().any(|e| e.extension_name_as_c_str().is_ok_and(|n| n == portability));
        let mut extensions = Vec::new();
        let mut flags = vk::InstanceCreateFlags::empty();
        if has_portability {
            // Lists devices that implement Vulkan only partly (MoltenVK); harmless elsewhere.
            extensions.push(portability.as_ptr());
            flags |= vk::InstanceCreateFlags::ENUMERATE_PORTABILITY_KHR;
        }
        let app = vk::ApplicationInfo::default().application_name(c"hrx").engine_name(c"hrx").api_version(api_version);
        let create =
            vk::InstanceCreateInfo::default().application_info(&app).enabled_extension_names(&extensions).flags(flags);
        // SAFETY: the create info and everything it points to live through the call.
        let raw = unsafe { entry.create_instance(&create, None) }.map_err(|e| match e {
            vk::Result::ERROR_INCOMPATIBLE_DRIVER => VkError::NoDevice,
            e => VkError::from_call("vkCreateInstance", e),
        })?;
        Ok(Instance { entry, raw, api_version, loader_version })
    }

    /// Every physical device, in the loader's order.
    pub fn devices(&self) -> Result<Vec<DeviceInfo>> {
        // SAFETY: the instance is alive.
        let handles = unsafe { self.raw.enumerate_physical_devices() }.map_err(call("vkEnumeratePhysicalDevices"))?;
        handles
            .into_iter()
            .enumerate()
            .map(|(i, pd)| info::query(&self.entry, &self.raw, self.api_version, i, pd))
            .collect()
    }

    /// The loader's version, "1.3.239".
    pub fn loader_version_str(&self) -> String {
        let v = self.loader_version;
        format!("{}.{}.{}", vk::api_version_major(v), vk::api_version_minor(v), vk::api_version_patch(v))
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        // SAFETY: every object made from this instance (devices, via `Shared`) is destroyed
        // before it: they own the instance.
        unsafe { self.raw.destroy_instance(None) };
    }
}
