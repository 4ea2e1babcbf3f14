//! The pipelines of a device's kernels, made on first use (several at once for a plan's).

use super::*;

/// The pipelines of a device, made on first use (through the pipeline cache).
pub struct KernelSet {
    device: Device,
    pipelines: Mutex<HashMap<KernelId, Pipeline>>,
}

impl KernelSet {
    pub fn new(device: &Device) -> KernelSet {
        KernelSet { device: device.clone(), pipelines: Mutex::new(HashMap::new()) }
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    pub fn pipeline(&self, id: KernelId) -> Result<Pipeline> {
        if let Some(p) = self.made(id) {
            return Ok(p);
        }
        // Made outside the lock: pipelines of other kernels are made meanwhile (`prepare`).
        let p = self.make(id)?;
        let mut map = self.pipelines.lock().unwrap_or_else(|e| e.into_inner());
        Ok(map.entry(id).or_insert(p).clone())
    }

    /// Makes the pipelines of `ids` that are not made yet, on up to one thread per core (the
    /// driver compiles each; an empty driver cache makes that most of a cold start).
    pub fn prepare(&self, ids: impl IntoIterator<Item = KernelId>) -> Result<()> {
        let mut todo: Vec<KernelId> = Vec::new();
        for id in ids {
            if !todo.contains(&id) && self.made(id).is_none() {
                todo.push(id);
            }
        }
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(todo.len());
        let next = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| -> Result<()> {
                        while let Some(&id) = todo.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)) {
                            self.pipeline(id)?;
                        }
                        Ok(())
                    })
                })
                .collect();
            workers.into_iter().try_for_each(|w| {
                w.join().unwrap_or_else(|_| Err(VkError::Thread("a pipeline-making thread panicked".into())))
            })
        })
    }

    fn made(&self, id: KernelId) -> Option<Pipeline> {
        self.pipelines.lock().unwrap_or_else(|e| e.into_inner()).get(&id).cloned()
    }

    fn make(&self, id: KernelId) -> Result<Pipeline> {
        let module = id.module();
        let spirv = shaders::spirv(&module)
            .ok_or_else(|| VkError::Pipeline { kernel: module.clone(), reason: "no such SPIR-V module".into() })?;
        let name = id.name();
        // A kernel built around a subgroup size runs at exactly that size: required where the
        // device allows it, else the device's one size.
        let info = self.device.info();
        let pins = info.pins_subgroups();
        if let Some(size) = id.subgroup().filter(|&s| !pins && s != info.subgroup_size) {
            return Err(VkError::Pipeline {
                kernel: name,
                reason: format!(
                    "built for subgroups of {size}; {} runs {} and a pipeline cannot require another",
                    info.name, info.subgroup_size
                ),
            });
        }
        let spec = PipelineSpec {
            name: &name,
            spirv,
            bindings: BINDINGS,
            push_bytes: id.push_bytes(),
            constants: &id.constants(),
            subgroup_size: id.subgroup().filter(|_| pins),
        };
        Pipeline::new(&self.device, &spec)
    }
}
