//! Which Vulkan device: the best by kind (discrete > integrated > virtual > CPU), then by
//! device-local memory, or one by its enumeration index (`backend::DeviceChoice` says which).

use super::error::{Result, VkError};
use super::info::DeviceInfo;

/// A choice among the Vulkan devices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selection {
    Best,
    Index(usize),
}

/// The position in `devices` of the device to use.
pub fn pick(devices: &[DeviceInfo], selection: &Selection) -> Result<usize> {
    if devices.is_empty() {
        return Err(VkError::NoDevice);
    }
    let usable = |d: &DeviceInfo| d.compute_queue_family.is_some();
    let bad = |value: String, reason: String| VkError::BadSelection { value, reason };
    match selection {
        Selection::Best => devices
            .iter()
            .enumerate()
            .filter(|(_, d)| usable(d))
            .max_by_key(|(i, d)| (d.kind, d.device_local_bytes(), std::cmp::Reverse(*i)))
            .map(|(i, _)| i)
            .ok_or_else(|| VkError::Unsupported {
                device: "every Vulkan device".into(),
                what: "no compute queue".into(),
            }),
        Selection::Index(n) => match devices.iter().position(|d| d.index == *n) {
            None => Err(bad(n.to_string(), format!("there are {} devices (0..{})", devices.len(), devices.len() - 1))),
            Some(i) if !usable(&devices[i]) => {
                Err(bad(n.to_string(), format!("{} has no compute queue", devices[i].name)))
            }
            Some(i) => Ok(i),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::vulkan::info::{DeviceKind, Heap};

    fn dev(index: usize, kind: DeviceKind, local: u64) -> DeviceInfo {
        DeviceInfo {
            heaps: vec![Heap { size: local, device_local: true, host_visible: false, host_cached: false }],
            ..DeviceInfo::fake(index, kind)
        }
    }

    #[test]
    fn best_is_discrete_then_integrated_then_cpu_then_memory() {
        let devs = vec![
            dev(0, DeviceKind::Cpu, 1 << 40),
            dev(1, DeviceKind::Integrated, 1 << 30),
            dev(2, DeviceKind::Discrete, 1 << 30),
        ];
        assert_eq!(pick(&devs, &Selection::Best).unwrap(), 2);
        assert_eq!(pick(&devs[..2], &Selection::Best).unwrap(), 1);
        let two = vec![dev(0, DeviceKind::Discrete, 1 << 30), dev(1, DeviceKind::Discrete, 1 << 34)];
        assert_eq!(pick(&two, &Selection::Best).unwrap(), 1);
        assert_eq!(pick(&devs, &Selection::Index(1)).unwrap(), 1);
    }

    #[test]
    fn bad_choices_are_errors_not_panics() {
        let mut devs = vec![dev(0, DeviceKind::Discrete, 1)];
        assert_eq!(pick(&[], &Selection::Best), Err(VkError::NoDevice));
        assert!(matches!(pick(&devs, &Selection::Index(3)), Err(VkError::BadSelection { .. })));
        devs[0].compute_queue_family = None;
        assert!(matches!(pick(&devs, &Selection::Best), Err(VkError::Unsupported { .. })));
        assert!(matches!(pick(&devs, &Selection::Index(0)), Err(VkError::BadSelection { .. })));
    }
}
