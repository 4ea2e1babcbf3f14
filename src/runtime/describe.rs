//! Images in, text out: decode and preprocess each image as the model's processor does, encode
//! it with the vision tower, place its tokens in the chat template, and generate.

use super::chat::{self, Content, Message};
use super::generate::{answer_budget, generate, Delta, GenerateConfig, Generation};
use super::progress::Notice;
use super::session::{PromptPiece, Session};
use super::text_model::{TextFile, TextModel, TextOptions};
use super::vision_model::{ImageRows, VisionModel};
use super::RuntimeError;
use crate::backend::Backend;
use crate::gguf::GgufFile;
use crate::image::{self, Limits, Patches, PreprocessConfig, RgbImage};
use crate::model::{ModelError, VisionParams};
use std::path::Path;
use std::sync::Arc;

/// How images are read and sized.
#[derive(Clone, Debug)]
pub struct ImageOptions {
    pub limits: Limits,
    pub min_pixels: usize,
    pub max_pixels: usize,
}

impl Default for ImageOptions {
    fn default() -> Self {
        ImageOptions {
            limits: Limits::default(),
            min_pixels: PreprocessConfig::HF_MIN_PIXELS,
            max_pixels: PreprocessConfig::KIOSK_MAX_PIXELS,
        }
    }
}

/// The conversation of one user turn: `images` images, then `text`, after a `system` turn.
fn user_turn(images: usize, text: &str, system: Option<&str>) -> Vec<Message> {
    let mut messages = Vec::new();
    if let Some(s) = system {
        messages.push(Message::text("system", s));
    }
    let mut content: Vec<Content> = (0..images).map(|_| Content::Image).collect();
    content.push(Content::Text(text.to_owned()));
    messages.push(Message { role: "user".into(), content });
    messages
}

/// An image known by its header: the name errors call it, its upright (width, height) and the
/// pixel budget it is to be resized within (at most the describer's).
pub struct SizedImage<'a> {
    pub name: &'a str,
    pub size: (usize, usize),
    pub max_pixels: usize,
}

/// An image ready for the prompt: its wide embedding rows and merged grid.
pub struct EncodedImage {
    pub embeddings: ImageRows,
    pub rows: usize,
    pub cols: usize,
    pub resized_hw: (usize, usize),
}

/// The encoded image of `patches`, from the vision tower's rows of it.
fn encoded(patches: &Patches, embeddings: ImageRows) -> EncodedImage {
    let [_, gh, gw] = patches.grid_thw;
    let merge = patches.merge_size;
    EncodedImage { embeddings, rows: gh / merge, cols: gw / merge, resized_hw: patches.resized_hw }
}

/// Reads and preprocesses image files for a describer, apart from it (on other threads, ahead
/// of the encoder): the limits, pixel budget and processor settings of the describer's.
#[derive(Clone, Debug)]
pub struct Preparer {
    limits: Limits,
    config: PreprocessConfig,
}

/// An image file read and preprocessed ahead of its encoding: its upright size from the
/// header, and its patches or why they could not be made (said after the prompt's size is
/// checked, as for a file encoded at once).
pub struct Prepared {
    pub name: String,
    size: (usize, usize),
    patches: Result<Patches, RuntimeError>,
}

impl Preparer {
    /// Reads the file and its header; decodes and preprocesses it.
    pub fn prepare(&self, path: &Path) -> Result<Prepared, RuntimeError> {
        let name = path.display().to_string();
        let bytes = image::read_file(path, &self.limits)?;
        let size = image::probe_bytes(&name, &bytes, &self.limits)?;
        let patches = image::decode_bytes(&name, &bytes, &self.limits)
            .and_then(|rgb| image::preprocess(&rgb, &self.config).map_err(|e| e.named(&name)))
            .map_err(RuntimeError::from);
        Ok(Prepared { name, size, patches })
    }
}

/// The text model and the vision tower, loaded once for many images.
pub struct Describer {
    text: TextModel,
    vision: VisionModel,
    images: ImageOptions,
    /// Where to say that an image is taking long (none: silent).
    notice: Option<Notice>,
}

impl Describer {
    /// Loads both models on the backend `text.device` chooses (the text model's file opened
    /// first: [`TextFile`]).
    pub fn load(
        model: &Path,
        mmproj: &Path,
        text: TextOptions,
        images: ImageOptions,
    ) -> Result<Describer, RuntimeError> {
        let file = TextFile::open(model)?;
        Self::load_file_on(file, mmproj, text, images, &Backend::open(text.device, text.kernels, text.check))
    }

    /// Loads both models on `backend` (one device for both).
    pub fn load_on(
        model: &Path,
        mmproj: &Path,
        text: TextOptions,
        images: ImageOptions,
        backend: &Backend,
    ) -> Result<Describer, RuntimeError> {
        Self::load_file_on(TextFile::open(model)?, mmproj, text, images, backend)
    }

    /// [`load_on`](Self::load_on) with the text model's file already open.
    pub fn load_file_on(
        model: TextFile,
        mmproj: &Path,
        text: TextOptions,
        images: ImageOptions,
        backend: &Backend,
    ) -> Result<Describer, RuntimeError> {
        let model_path = model.path().to_owned();
        if images.min_pixels > images.max_pixels || images.max_pixels == 0 {
            return Err(RuntimeError::Usage(format!(
                "the image pixel budget {}..{} is empty",
                images.min_pixels, images.max_pixels
            )));
        }
        // The two models load side by side (file reads, uploads and pipelines of each overlap
        // the other's); the text model's error, if any, is the one reported.
        let (text_model, vision) = std::thread::scope(|s| {
            let vision = s.spawn(|| {
                let t0 = std::time::Instant::now();
                // Plan the encoder once, for the largest image the budget lets through.
                let file = Arc::new(GgufFile::open(mmproj)?);
                let patch = VisionParams::from_gguf(&file)?.patch_size;
                let max_patches = images.max_pixels / (patch * patch);
                let vision = VisionModel::load_on(file, max_patches, backend)?;
                log::debug!("vision model loaded in {:.3} s", t0.elapsed().as_secs_f64());
                Ok::<_, RuntimeError>((vision, patch, max_patches))
            });
            let t0 = std::time::Instant::now();
            let text_model = TextModel::load_file_on(model, text, backend);
            log::debug!("text model loaded in {:.3} s", t0.elapsed().as_secs_f64());
            let vision = vision
                .join()
                .unwrap_or_else(|_| Err(RuntimeError::Usage("the thread loading the vision model failed".into())));
            (text_model, vision)
        });
        let text_model = text_model?;
        let (vision, patch, max_patches) = vision?;
        let images = fit_images(images, &vision, patch, max_patches)?;
        if vision.params().wide_width() != text_model.params().wide_width() {
            return Err(RuntimeError::Model(ModelError {
                file: mmproj.to_owned(),
                what: "projection width".into(),
                message: format!(
                    "{} values per image token, {} takes {}: the projector does not belong to this model",
                    vision.params().wide_width(),
                    model_path.display(),
                    text_model.params().wide_width()
                ),
            }));
        }
        Ok(Describer { text: text_model, vision, images, notice: None })
    }

    /// Both models again on a new backend (`on_cpu`: hrx's CPU backend; else the device their
    /// options choose, opened anew), their files, tokenizer and settings kept: what a
    /// long-running command does once its device was lost (`runtime::recover`).
    pub fn reopen(&self, on_cpu: bool) -> Result<Describer, RuntimeError> {
        let o = self.text.options();
        let backend = match on_cpu {
            true => Backend::Cpu(o.kernels),
            false => Backend::open(o.device, o.kernels, o.check),
        };
        let text = self.text.reload_on(&backend)?;
        let vision = self.vision.reload_on(&backend)?;
        let patch = vision.params().patch_size;
        let images = fit_images(self.images.clone(), &vision, patch, self.vision.max_patches())?;
        Ok(Describer { text, vision, images, notice: self.notice })
    }

    /// Whether a model's device was lost (or hung): nothing more runs on it.
    pub fn device_lost(&self) -> bool {
        self.text.backend().lost() || self.vision.backend().lost()
    }

    /// Ends a one-shot command's use of the models, its output written: the pipeline cache is
    /// saved and the rest (device memory, pipelines, the device) left to the process's exit to
    /// reclaim, as a compiler leaves its heap. Destroyed one by one they took 0.14 s of a 0.8 s
    /// describe on the H200. Only for a process about to end.
    pub fn leave(self) {
        self.text.backend().save_caches();
        std::mem::forget(self);
    }

    pub fn text(&self) -> &TextModel {
        &self.text
    }

    pub fn text_mut(&mut self) -> &mut TextModel {
        &mut self.text
    }

    /// What prepares images for this describer on other threads.
    pub fn preparer(&self) -> Result<Preparer, RuntimeError> {
        Ok(Preparer { limits: self.images.limits, config: self.preprocess_config(self.images.max_pixels)? })
    }

    /// Encodes images `preparer` made, each for a user turn of `text` (after `system`), several
    /// a vision run where their patches fit its plan together (in order; many small images
    /// then fill the products of one run instead of a run each): a result per image, in
    /// order. A prompt that would not fit the context is refused from the header's size first.
    pub fn encode_prepared(
        &mut self,
        prepared: Vec<Prepared>,
        text: &str,
        system: Option<&str>,
    ) -> Vec<Result<EncodedImage, RuntimeError>> {
        let mut results: Vec<Result<EncodedImage, RuntimeError>> = Vec::with_capacity(prepared.len());
        // The images not yet encoded, one run's worth: each one's place in `results`, name and
        // patches.
        let mut run: Vec<(usize, String, Patches)> = Vec::new();
        let mut run_patches = 0;
        for Prepared { name, size, patches } in prepared {
            let sized = SizedImage { name: &name, size, max_pixels: self.images.max_pixels };
            let checked = self.check_prompt(&user_turn(1, text, system), &[sized]).and(patches);
            let patches = match checked {
                Ok(patches) => patches,
                Err(e) => {
                    results.push(Err(e));
                    continue;
                }
            };
            let n = patches.grid_thw[1] * patches.grid_thw[2];
            if run_patches + n > self.vision.max_patches() {
                self.encode_run(std::mem::take(&mut run), &mut results);
                run_patches = 0;
            }
            run_patches += n;
            // A placeholder the run's encode replaces.
            results.push(Err(RuntimeError::Usage(format!("internal: {name} was not encoded"))));
            run.push((results.len() - 1, name, patches));
        }
        self.encode_run(run, &mut results);
        results
    }

    /// Encodes `run`'s images (their patches fit the vision plan together) in one vision run
    /// into their places in `results`; where the run fails, each image alone, with its own
    /// error.
    fn encode_run(&mut self, run: Vec<(usize, String, Patches)>, results: &mut [Result<EncodedImage, RuntimeError>]) {
        let what = match run.as_slice() {
            [] => return,
            [(_, one, _)] => one.clone(),
            [(_, first, _), rest @ ..] => format!("{first} and {} more", rest.len()),
        };
        let images: Vec<(&[f32], usize, usize)> =
            run.iter().map(|(_, _, p)| (p.pixel_values.as_slice(), p.grid_thw[1], p.grid_thw[2])).collect();
        match self.noting(&what, |d| d.vision.encode_together(&images)) {
            Ok(rows) => {
                for ((at, _, patches), embeddings) in run.iter().zip(rows) {
                    results[*at] = Ok(encoded(patches, embeddings));
                }
            }
            Err(_) => {
                for (at, name, patches) in &run {
                    results[*at] = self.noting(name, |d| d.encode_patches(patches));
                }
            }
        }
    }

    pub fn vision(&self) -> &VisionModel {
        &self.vision
    }

    /// Says on `notice` when reading and encoding an image takes longer than its wait.
    pub fn set_progress(&mut self, notice: Notice) {
        self.notice = Some(notice);
    }

    /// Runs `work`, with word of it where a notice is set.
    fn noting<T>(&mut self, name: &str, work: impl FnOnce(&mut Self) -> T) -> T {
        match self.notice {
            None => work(self),
            Some(notice) => notice.around(&format!("encoding {name}"), || work(self)),
        }
    }

    /// CPU threads of both models' kernels (the Vulkan executor takes none).
    pub fn set_threads(&mut self, n: usize) {
        self.text.set_threads(n);
        self.vision.set_threads(n);
    }

    /// The processor settings of this projector (images are RGB: three channels) for images
    /// resized within `max_pixels`, held within the describer's budget (its vision plan holds
    /// no larger image).
    fn preprocess_config(&self, max_pixels: usize) -> Result<PreprocessConfig, RuntimeError> {
        let p = self.vision.params();
        let channels = |what: &str, n: usize| {
            RuntimeError::Usage(format!("the projector's {what} has {n} colour channels; images have 3"))
        };
        let rgb = |v: &[f32], what: &str| -> Result<[f32; 3], RuntimeError> {
            <[f32; 3]>::try_from(v).map_err(|_| channels(what, v.len()))
        };
        if p.n_channels != 3 {
            return Err(channels("patch embedding", p.n_channels));
        }
        Ok(PreprocessConfig {
            patch_size: p.patch_size,
            merge_size: p.merge,
            temporal_patch_size: p.n_temporal,
            min_pixels: self.images.min_pixels,
            max_pixels: max_pixels.min(self.images.max_pixels).max(self.images.min_pixels),
            image_mean: rgb(&p.image_mean, "image_mean")?,
            image_std: rgb(&p.image_std, "image_std")?,
        })
    }

    /// The prompt tokens an image takes (its merged grid after the processor's resize), known
    /// from its header before it is decoded.
    pub fn image_tokens(&self, image: &SizedImage) -> Result<usize, RuntimeError> {
        let (name, (width, height)) = (image.name, image.size);
        let c = self.preprocess_config(image.max_pixels)?;
        let factor = c.patch_size * c.merge_size;
        let (h, w) =
            image::smart_resize(height, width, factor, c.min_pixels, c.max_pixels).map_err(|e| e.named(name))?;
        Ok((h / factor) * (w / factor))
    }

    /// The fewest prompt tokens an image can take. The processor resizes an image under
    /// `min_pixels` up, its grid then covering at least that many pixels, and one over
    /// `max_pixels` down, each side floored to the grid: then at least half of `max_pixels` less
    /// one cell, whatever the aspect. Images in between keep at least `min_pixels`.
    pub fn min_image_tokens(&self) -> Result<usize, RuntimeError> {
        let c = self.preprocess_config(self.images.max_pixels)?;
        let cell = (c.patch_size * c.merge_size).pow(2).max(1);
        let resized_up = c.min_pixels.div_ceil(cell);
        let resized_down = (c.max_pixels / 2).saturating_sub(cell) / cell;
        Ok(resized_up.min(resized_down).max(1))
    }

    /// Refuses, before any image is read, a job of one-image turns of `text` (after `system`)
    /// that every image would fail: a prompt that does not fit the context even with the
    /// smallest image, or a JSON answer that could not close within what the token limit and
    /// the context then leave it.
    pub fn check_job(&self, text: &str, system: Option<&str>, config: &GenerateConfig) -> Result<(), RuntimeError> {
        let (ids, pad) = (self.template_ids(&user_turn(1, text, system))?, self.image_pad()?);
        let pads = ids.iter().filter(|&&id| id == pad).count();
        let needed = ids.len() - pads + pads * self.min_image_tokens()?;
        let n_ctx = self.text.options().n_ctx;
        if needed > n_ctx {
            return Err(RuntimeError::ContextFull { needed, n_ctx });
        }
        answer_budget(config, self.text.tokenizer(), needed, n_ctx)?;
        Ok(())
    }

    /// The prompt tokens of a conversation whose images (its `Content::Image`s, in order) have
    /// these names and upright sizes, counted before anything is decoded or run; a prompt that
    /// does not fit the context is refused here with its real size.
    pub fn check_prompt(&self, messages: &[Message], images: &[SizedImage]) -> Result<usize, RuntimeError> {
        self.check_counted(&self.template_ids(messages)?, images)
    }

    /// [`Describer::check_prompt`] of a conversation whose template ids (`chat::tokens`, one
    /// image pad per image) were counted already.
    pub fn check_counted(&self, ids: &[u32], images: &[SizedImage]) -> Result<usize, RuntimeError> {
        let pad = self.image_pad()?;
        let pads = ids.iter().filter(|&&id| id == pad).count();
        if pads != images.len() {
            return Err(RuntimeError::Usage(format!(
                "{pads} places for images in the messages and {} images",
                images.len()
            )));
        }
        let mut needed = ids.len() - pads;
        for image in images {
            needed += self.image_tokens(image)?;
        }
        let n_ctx = self.text.options().n_ctx;
        if needed > n_ctx {
            return Err(RuntimeError::ContextFull { needed, n_ctx });
        }
        Ok(needed)
    }

    /// The chat template's token ids for `messages` (one image pad per image).
    fn template_ids(&self, messages: &[Message]) -> Result<Vec<u32>, RuntimeError> {
        chat::tokens(messages, true, self.text.tokenizer(), None).map_err(|e| match e {
            chat::Uncounted::NoToken(name) => self.no_token(name),
            e => RuntimeError::Usage(e.to_string()),
        })
    }

    /// The image pad's id.
    fn image_pad(&self) -> Result<u32, RuntimeError> {
        self.text.tokenizer().token_id(chat::IMAGE_PAD).ok_or_else(|| self.no_token(chat::IMAGE_PAD))
    }

    fn no_token(&self, name: &str) -> RuntimeError {
        RuntimeError::Model(ModelError {
            file: self.text.file().path().to_owned(),
            what: "vocabulary".into(),
            message: format!("no {name}"),
        })
    }

    /// The pixel budget images are resized within: the one asked for, or less where the
    /// device cannot hold it.
    pub fn max_pixels(&self) -> usize {
        self.images.max_pixels
    }

    /// The size smaller images are resized up to.
    pub fn min_pixels(&self) -> usize {
        self.images.min_pixels
    }

    /// The limits images are read within.
    pub fn image_limits(&self) -> Limits {
        self.images.limits
    }

    /// Reads, sizes and encodes the image files of a user turn of `text` (after `system`), the
    /// images first: a prompt that would not fit the context is refused from the headers'
    /// sizes, before any image is decoded.
    pub fn encode_files_for(
        &mut self,
        paths: &[&Path],
        text: &str,
        system: Option<&str>,
    ) -> Result<Vec<EncodedImage>, RuntimeError> {
        let limits = self.images.limits;
        let files = paths
            .iter()
            .map(|path| Ok((path.display().to_string(), image::read_file(path, &limits)?)))
            .collect::<Result<Vec<_>, RuntimeError>>()?;
        self.encode_images_for(&files, text, system)
    }

    /// The same for images already read: (name for errors, the file's bytes).
    pub fn encode_images_for(
        &mut self,
        files: &[(String, Vec<u8>)],
        text: &str,
        system: Option<&str>,
    ) -> Result<Vec<EncodedImage>, RuntimeError> {
        let (limits, max_pixels) = (self.images.limits, self.images.max_pixels);
        let sized = files
            .iter()
            .map(|(name, bytes)| Ok(SizedImage { name, size: image::probe_bytes(name, bytes, &limits)?, max_pixels }))
            .collect::<Result<Vec<SizedImage>, RuntimeError>>()?;
        self.check_prompt(&user_turn(files.len(), text, system), &sized)?;
        files.iter().map(|(name, bytes)| self.encode_bytes(name, bytes, max_pixels)).collect()
    }

    /// Decodes, preprocesses and encodes one image file within the describer's budget.
    pub fn encode_file(&mut self, path: &Path) -> Result<EncodedImage, RuntimeError> {
        let name = path.display().to_string();
        self.noting(&name, |d| {
            let rgb = image::decode_file(path, &d.images.limits)?;
            d.encode_rgb(&name, &rgb, d.images.max_pixels)
        })
    }

    /// Decodes, preprocesses and encodes an image held in memory, resized within `max_pixels`
    /// (held within the describer's budget); errors call it `name`.
    pub fn encode_bytes(&mut self, name: &str, bytes: &[u8], max_pixels: usize) -> Result<EncodedImage, RuntimeError> {
        self.noting(name, |d| {
            let rgb = image::decode_bytes(name, bytes, &d.images.limits)?;
            d.encode_rgb(name, &rgb, max_pixels)
        })
    }

    fn encode_rgb(&mut self, name: &str, rgb: &RgbImage, max_pixels: usize) -> Result<EncodedImage, RuntimeError> {
        let patches = image::preprocess(rgb, &self.preprocess_config(max_pixels)?).map_err(|e| e.named(name))?;
        self.encode_patches(&patches)
    }

    pub fn encode_patches(&mut self, patches: &Patches) -> Result<EncodedImage, RuntimeError> {
        let [_, gh, gw] = patches.grid_thw;
        Ok(encoded(patches, self.vision.encode(&patches.pixel_values, gh, gw)?))
    }

    /// Token ids of one user turn [images..., text] with the generation prompt, image pads
    /// expanded as HF's processor expands them, and the prompt pieces that carry the images.
    pub fn prompt<'a>(
        &self,
        images: &'a [EncodedImage],
        text: &str,
        system: Option<&str>,
    ) -> Result<(Vec<u32>, Vec<PromptPiece<'a>>), RuntimeError> {
        self.prompt_messages(&user_turn(images.len(), text, system), images)
    }

    /// Token ids of a conversation with the generation prompt, and its prompt pieces: the
    /// `Content::Image`s of `messages` take `images` in order, one each.
    pub fn prompt_messages<'a>(
        &self,
        messages: &[Message],
        images: &'a [EncodedImage],
    ) -> Result<(Vec<u32>, Vec<PromptPiece<'a>>), RuntimeError> {
        self.prompt_counted(&self.template_ids(messages)?, images)
    }

    /// [`Describer::prompt_messages`] of a conversation whose template ids were counted
    /// already (`chat::tokens`).
    pub fn prompt_counted<'a>(
        &self,
        ids: &[u32],
        images: &'a [EncodedImage],
    ) -> Result<(Vec<u32>, Vec<PromptPiece<'a>>), RuntimeError> {
        let pad = self.image_pad()?;
        let mut expanded = Vec::with_capacity(ids.len());
        let mut pieces = Vec::with_capacity(ids.len());
        let mut next_image = images.iter();
        for &id in ids {
            if id != pad {
                expanded.push(id);
                pieces.push(PromptPiece::Token(id));
                continue;
            }
            // Only the template places image pads (text is tokenized as text), one per image.
            let img = next_image
                .next()
                .ok_or_else(|| RuntimeError::Usage("there are more places for images than images".into()))?;
            expanded.extend(std::iter::repeat_n(pad, img.rows * img.cols));
            pieces.push(PromptPiece::Image { embeddings: &img.embeddings, rows: img.rows, cols: img.cols });
        }
        if next_image.next().is_some() {
            return Err(RuntimeError::Usage("there are more images than places for them in the messages".into()));
        }
        Ok((expanded, pieces))
    }

    /// Describes `images` (one user turn) and streams the answer.
    pub fn run(
        &mut self,
        images: &[EncodedImage],
        text: &str,
        system: Option<&str>,
        config: &GenerateConfig,
        on_text: impl FnMut(&Delta) -> std::ops::ControlFlow<()>,
    ) -> Result<(Vec<u32>, Generation), RuntimeError> {
        let (ids, pieces) = self.prompt(images, text, system)?;
        let generation = generate(&mut self.text, &mut Session::new(), &pieces, config, on_text)?;
        Ok((ids, generation))
    }

    /// Answers a conversation (see [`Describer::prompt_messages`]) and streams the answer.
    pub fn run_messages(
        &mut self,
        messages: &[Message],
        images: &[EncodedImage],
        config: &GenerateConfig,
        on_text: impl FnMut(&Delta) -> std::ops::ControlFlow<()>,
    ) -> Result<(Vec<u32>, Generation), RuntimeError> {
        let (ids, pieces) = self.prompt_messages(messages, images)?;
        let generation = generate(&mut self.text, &mut Session::new(), &pieces, config, on_text)?;
        Ok((ids, generation))
    }
}

/// `images`, their largest resized to what the encoder `vision` holds where its device could
/// not bind the `asked` patches it was asked to plan for (with a warning then); an error where
/// that is below the least the processor resizes to.
fn fit_images(
    mut images: ImageOptions,
    vision: &VisionModel,
    patch: usize,
    asked: usize,
) -> Result<ImageOptions, RuntimeError> {
    let merge = vision.params().merge_patches();
    if vision.max_patches() < asked / merge * merge {
        images.max_pixels = vision.max_patches() * patch * patch;
    }
    if images.max_pixels < images.min_pixels {
        return Err(RuntimeError::Usage(format!(
            "this device holds images of at most {} pixels, under the least the processor resizes to ({})",
            images.max_pixels, images.min_pixels
        )));
    }
    Ok(images)
}
