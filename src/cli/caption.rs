//! `hrx caption DIR|FILE|@LIST... -o OUT.jsonl`: caption many images unattended, one JSON line
//! per image, resumable.

use super::describe::{answer_json, DescriberFlags};
use super::flags::{self, json_schema_help, Flag, Help, BATCH, PROMPT, SYSTEM};
use super::{CliError, Command};
use crate::caption::discover::find_images;
use crate::caption::journal::{self, Journal, OpenError};
use crate::caption::report::Summary;
use crate::caption::shard::Shard;
use crate::caption::sidecar::{Caption, Format, Mode, Sidecars};
use crate::cli::args::Args;
use crate::json::Json;
use crate::runtime::batch::{Batch, Finished, Quiet, Start, Started, Stepped};
use crate::runtime::describe::Describer;
use crate::runtime::generate::{GenerateConfig, Generation};
use crate::runtime::recover::Losses;
use crate::runtime::RuntimeError;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

fn help() -> String {
    let mut options = vec![
        OUTPUT.help("the JSON Lines file (new; an existing one that is not empty needs --resume or --overwrite)"),
        RESUME.help("keep FILE and skip the images it already has a caption or an error for"),
        OVERWRITE.help("start FILE anew even if it holds captions"),
        RETRY_FAILED.help("with --resume, caption again the images FILE has only errors for"),
        WAIT.help("when another run is writing FILE, wait for it to end (default: exit 4 at once)"),
        REPORT.help("after the run, also write an HTML page of FILE's results to review (as hrx report)"),
        SHARD.help(
            "caption shard K of N (from 0): the images whose path within their input folder\n\
             hashes to K, the same share on every box; auto: the index a scheduler gives, from\n\
             JOB_COMPLETION_INDEX (Kubernetes Indexed Job, with --shards) or SLURM_ARRAY_TASK_ID\n\
             and SLURM_ARRAY_TASK_COUNT (Slurm job array). {shard} in -o becomes K",
        ),
        SHARDS.help("with --shard auto: how many shards (a Kubernetes Indexed Job's completions)"),
        SIDECAR.help(
            "also write each caption beside its image: NAME.txt (plain text, as kohya sd-scripts,\n\
             OneTrainer and taggui read), or NAME.xmp (XMP: dc:description, and dc:subject from a\n\
             --json-schema answer's \"tags\" array; digiKam, darktable, Lightroom)",
        ),
        SIDECAR_MODE.help(
            "where a sidecar exists (default: skip): skip leaves it and counts the image done;\n\
             overwrite replaces it; append and prepend add the caption as a line after or before\n\
             its text (an XMP file's dc:description)",
        ),
        PROMPT.help("what to ask (default: \"Describe this image.\")"),
        SYSTEM.help("a system turn"),
        json_schema_help(),
        BATCH.help(format!(
            "captions decoded together, each in its own KV cache of --ctx slots ({});\n\
             1 captions one image after another",
            flags::sequences_default_help()
        )),
    ];
    options.extend(DescriberFlags::help());
    Help {
        title: "hrx caption: caption a batch of images into a JSON Lines file (for cron jobs)",
        usage: "hrx caption DIR|FILE|@LIST [...] -o CAPTIONS.jsonl [-p PROMPT] [--resume]\n\
                \x20                  [-m MODEL.gguf --mmproj MMPROJ.gguf] [options]",
        about: "Folders are searched recursively for PNG, JPEG and WebP files (by extension or by\n\
                their first bytes; links to folders are not followed); @LIST reads paths from a file,\n\
                one a line. Images are started in sorted order with the model loaded once, read and\n\
                preprocessed on other threads ahead of the model; with --batch above 1 several captions\n\
                are decoded together, and a finished one makes room for the next image at once. Each\n\
                result is appended to the output and flushed as soon as it is known (in the order the\n\
                captions end):\n\
                \x20 {\"image\":PATH,\"caption\":TEXT,\"tokens\":N,\"seconds\":S}  or  {\"image\":PATH,\"error\":MESSAGE}\n\
                (PATH: the image's canonical path, so that a run from another folder knows it),\n\
                (with --json-schema, also \"json\": the answer as a JSON value, after \"caption\").\n\
                A bad image never stops the batch; its error is recorded once, and --resume skips it\n\
                (--retry-failed tries it again: a caption is then added, a second failure is not).\n\
                Images are one image however they are named (x.png, ./x.png, /abs/x.png). With\n\
                --resume a last line cut short by a killed job is removed.\n\
                With --sidecar the caption (a --json-schema answer's \"description\" or \"caption\" field\n\
                where it has one) also goes beside the image, written whole or not at all (a\n\
                temporary file renamed over it); FILE stays the record of the run. hrx never writes\n\
                into an image file itself.\n\
                A lost GPU (VK_ERROR_DEVICE_LOST, or a submission past HRX_VK_TIMEOUT) loses no image:\n\
                the models are loaded again on a new device (after three losses in ten minutes, on\n\
                the CPU) and the images under way are captioned again.\n\
                Progress and a summary go to standard error.\n\
                One run writes FILE at a time (an advisory lock, held until the run ends): a run that\n\
                finds it held says which process holds it and exits 4, or waits with --wait.\n\
                Before any image, a job that every image would fail is refused (exit 2, FILE left as\n\
                it was): a prompt that does not fit --ctx even with the smallest image, or a\n\
                --json-schema whose shortest document does not fit -n.\n\
                exit codes: 0 the run captioned everything it tried (or there was nothing left to do,\n\
                no image found included); 3 it finished, and some images failed in this run (see their\n\
                lines in FILE); 1 it could not run (model, output file); 2 a wrong command line, an input\n\
                that is missing, unreadable or not a regular file or folder (on every run: nothing is\n\
                written), an output that holds captions without --resume or --overwrite, or a job\n\
                every image would fail; 4 another run is writing FILE.",
        options,
        footer: "examples:\n  hrx caption photos/ -o captions.jsonl\n  hrx caption dataset/ -o captions.jsonl --resume --sidecar txt -p 'One line for a training caption.'\n  hrx caption @new-files.txt -o captions.jsonl --resume -p 'One sentence alt text.'",
    }
    .render()
}

const OUTPUT: Flag = Flag { names: &["-o", "--output"], value: "FILE" };
const RESUME: Flag = Flag { names: &["--resume"], value: "" };
const RETRY_FAILED: Flag = Flag { names: &["--retry-failed"], value: "" };
const OVERWRITE: Flag = Flag { names: &["--overwrite"], value: "" };
const WAIT: Flag = Flag { names: &["--wait"], value: "" };
const REPORT: Flag = Flag { names: &["--report"], value: "REPORT.html" };
const SHARD: Flag = Flag { names: &["--shard"], value: "K/N|auto" };
const SHARDS: Flag = Flag { names: &["--shards"], value: "N" };
const SIDECAR: Flag = Flag { names: &["--sidecar"], value: "txt|xmp" };
const SIDECAR_MODE: Flag = Flag { names: &["--sidecar-mode"], value: "MODE" };

pub const COMMAND: Command =
    Command { name: "caption", summary: "caption a batch of images into JSON Lines", help, run };

fn run(mut args: Args, _out: &mut dyn Write) -> Result<(), CliError> {
    let output = OUTPUT.string(&mut args)?.ok_or_else(|| CliError::usage("caption needs -o CAPTIONS.jsonl"))?;
    let resume = RESUME.present(&mut args);
    let retry_failed = RETRY_FAILED.present(&mut args);
    if retry_failed && !resume {
        return Err(CliError::usage("--retry-failed goes with --resume"));
    }
    let overwrite = OVERWRITE.present(&mut args);
    let wait = WAIT.present(&mut args);
    let sidecars = sidecar_flags(&mut args)?;
    let shard = shard_flags(&mut args)?;
    let report = REPORT.string(&mut args)?.map(PathBuf::from);
    if overwrite && resume {
        return Err(CliError::usage("--overwrite and --resume disagree: give one"));
    }
    let prompt = PROMPT.string(&mut args)?.unwrap_or_else(|| "Describe this image.".to_owned());
    let system = SYSTEM.string(&mut args)?;
    let batch = flags::sequences(&mut args, &BATCH)?;
    let mut flags = DescriberFlags::parse(&mut args)?;
    let system = flags.with_json_schema(&mut args, system)?;
    let inputs = args.finish()?;
    if inputs.is_empty() {
        return Err(CliError::usage("caption needs at least one DIR, FILE or @LIST"));
    }
    let output = PathBuf::from(match shard {
        Some(s) => output.replace("{shard}", &s.index.to_string()),
        None if output.contains("{shard}") => {
            return Err(CliError::usage(format!("-o {output}: {{shard}} goes with --shard")));
        }
        None => output,
    });
    let in_output = |e: std::io::Error| CliError::os(output.display())(e);
    let mut found = find_images(&inputs);
    // An input that is not there is the run's error, on every run: a nightly job whose folder
    // vanished must not go green once its first failure is recorded.
    if !found.problems.is_empty() {
        let lines: Vec<String> = found.problems.iter().map(|(_, why)| why.clone()).collect();
        return Err(CliError::usage(format!("{}; nothing was captioned", lines.join("; "))));
    }
    if let Some(shard) = shard {
        let all = std::mem::take(&mut found.images);
        let (mine, all): (Vec<PathBuf>, usize) =
            (all.iter().filter(|p| shard.takes(found.relative(p))).cloned().collect(), all.len());
        found.images = mine;
        eprintln!("hrx caption: shard {} of {}: {} of {all} images", shard.index, shard.count, found.images.len());
    }
    if found.images.is_empty() {
        eprintln!("hrx caption: no images found in {}: nothing to do", inputs.join(" "));
        return Ok(());
    }
    // Two images with one sidecar (a.png, a.jpg: a.txt) would take each other's caption.
    if let Some(s) = sidecars {
        let mut owners = std::collections::HashMap::new();
        for image in &found.images {
            if let Some(other) = owners.insert(s.path(image), image) {
                return Err(CliError::usage(format!(
                    "{} and {} would share the sidecar {}; nothing was captioned",
                    other.display(),
                    image.display(),
                    s.path(image).display()
                )));
            }
        }
    }
    let mut journal = Journal::lock(&output, wait, |who| {
        eprintln!("hrx caption: {} is being written by {}: waiting for it", output.display(), holder_name(who))
    })
    .map_err(|e| match e {
        OpenError::Busy(who) => CliError::Busy(format!(
            "{} is being written by {} (--wait waits for it)",
            output.display(),
            holder_name(who)
        )),
        OpenError::Io(e) => in_output(e),
    })?;
    // A file of captions is not cut to nothing by a run that forgot --resume.
    let holds = std::fs::metadata(&output).is_ok_and(|m| m.len() > 0);
    if holds && !resume && !overwrite {
        return Err(CliError::usage(format!(
            "{} holds captions already: --resume adds to it, --overwrite starts it anew",
            output.display()
        )));
    }
    let recorded = if resume { journal::recorded(&output).map_err(in_output)? } else { Default::default() };
    let mut tally = Tally::default();
    // What this run does with an image: skip it (recorded before) or try it.
    let mut skip = |path: &Path| {
        let key = journal::image_key(path);
        if recorded.captioned.contains(&key) {
            tally.skipped += 1;
        } else if recorded.failed.contains(&key) && !retry_failed {
            tally.failed_before += 1;
        } else if sidecars.is_some_and(|s| s.skips(path)) {
            tally.had_sidecar += 1;
        } else {
            return false;
        }
        true
    };
    let todo: Vec<&PathBuf> = found.images.iter().filter(|path| !skip(path)).collect();
    eprintln!(
        "hrx caption: {} images to caption, {} already in {}{}{}",
        todo.len(),
        tally.skipped + tally.failed_before,
        output.display(),
        match tally.failed_before {
            0 => String::new(),
            n => format!(" ({n} with errors, not retried without --retry-failed)"),
        },
        match tally.had_sidecar {
            0 => String::new(),
            n => format!(", {n} with a sidecar already (--sidecar-mode skip)"),
        }
    );
    // The model, and a job every image would fail refused, before the output changes.
    let loaded = match todo.is_empty() {
        true => None,
        false => {
            let (d, n_seq) = flags.load_batched(batch, &BATCH)?;
            d.check_job(&prompt, system.as_deref(), &flags.config)
                .map_err(|e| CliError::usage(format!("every image would fail: {e}; nothing was captioned")))?;
            Some((d, n_seq))
        }
    };
    let cut = journal.start(resume).map_err(in_output)?;
    if cut > 0 {
        eprintln!(
            "hrx caption: removed the last line of {}, cut short ({cut} bytes) by a killed job",
            output.display()
        );
    }
    let mut device = None;
    if let Some((mut d, n_seq)) = loaded {
        device = Some(d.text().backend().describe());
        tally.batch = n_seq;
        d.set_progress(super::describe::stderr_notice());
        let job = Job { prompt: &prompt, system: system.as_deref(), config: &flags.config };
        let (total, start) = (todo.len(), Instant::now());
        let mut progress = Progress {
            output: &output,
            journal: &mut journal,
            tally: &mut tally,
            total,
            start,
            busy: 0.0,
            recorded: &recorded,
            sidecars,
        };
        // A lost device loses no image: the models are loaded again and what was under way is
        // captioned again (runtime::recover).
        let mut losses = Losses::default();
        if n_seq == 1 {
            for path in &todo {
                let t = Instant::now();
                let entry = loop {
                    let entry = job.caption(&mut d, path);
                    if !d.device_lost() {
                        break entry;
                    }
                    d = losses.recover(&d, &format!("captioning {}", path.display()))?;
                };
                progress.report(path, entry, t)?;
            }
        } else {
            job.caption_batched(&mut d, &todo, &mut progress, &mut losses)?;
        }
        tally.seconds = progress.start.elapsed().as_secs_f64();
    }
    eprintln!("{}", tally.summary());
    drop(journal);
    if let Some(report) = &report {
        let per_minute = (tally.done > 0 && tally.seconds > 0.0).then(|| tally.done as f64 * 60.0 / tally.seconds);
        let n = super::report::write(&output, report, &Summary { per_minute, device })?;
        eprintln!("hrx caption: wrote the report {} ({n} images)", report.display());
    }
    match tally.failed {
        0 => Ok(()),
        n => Err(CliError::Partial(format!("{n} images failed in this run (see {})", output.display()))),
    }
}

/// Records each result as it is known and says so on stderr.
struct Progress<'a> {
    output: &'a Path,
    journal: &'a mut Journal,
    tally: &'a mut Tally,
    total: usize,
    start: Instant,
    /// Seconds each finished image took, from its start to its record, summed.
    busy: f64,
    /// What the output held before this run: an image that fails again keeps its one record.
    recorded: &'a journal::Recorded,
    sidecars: Option<Sidecars>,
}

impl Progress<'_> {
    /// Records the caption (or the error) of the image at `path`, begun at `t`.
    /// A caption's sidecar is written before its record: a record means its sidecar is there.
    fn report(&mut self, path: &Path, entry: Result<Json, RuntimeError>, t: Instant) -> Result<(), CliError> {
        let entry = entry.map_err(|e| e.to_string()).and_then(|entry| match self.sidecars {
            None => Ok(entry),
            Some(s) => s
                .write(path, &sidecar_caption(&entry))
                .map(|()| entry)
                .map_err(|e| format!("writing the sidecar {}: {e}", s.path(path).display())),
        });
        let (entry, failed) = match entry {
            Ok(entry) => {
                self.tally.done += 1;
                (entry, false)
            }
            Err(e) => {
                self.tally.failed += 1;
                eprintln!("hrx: error: {e}");
                (failure(path, &e), true)
            }
        };
        // An image retried (--retry-failed) that fails again keeps its one error record.
        if !(failed && self.recorded.failed.contains(&journal::image_key(path))) {
            self.journal.record(&entry).map_err(CliError::os(self.output.display()))?;
        }
        let n = self.tally.done + self.tally.failed;
        let left = self.total.saturating_sub(n);
        self.busy += t.elapsed().as_secs_f64();
        let eta = eta(self.busy, n, left, self.tally.batch.min(self.total));
        eprintln!(
            "[{n}/{}] {} — {:.1} s, ETA {}",
            self.total,
            path.display(),
            t.elapsed().as_secs_f64(),
            duration(eta)
        );
        Ok(())
    }
}

struct Job<'a> {
    prompt: &'a str,
    system: Option<&'a str>,
    config: &'a GenerateConfig,
}

impl Job<'_> {
    fn caption(&self, d: &mut Describer, path: &Path) -> Result<Json, RuntimeError> {
        let t = Instant::now();
        let images = d.encode_files_for(&[path], self.prompt, self.system)?;
        let (_, g) = d.run(&images, self.prompt, self.system, self.config, |_| std::ops::ControlFlow::Continue(()))?;
        Ok(self.entry(path, &g, t))
    }

    /// The record of a caption of the image at `path`, begun at `t`.
    fn entry(&self, path: &Path, g: &Generation, t: Instant) -> Json {
        let mut fields = vec![
            ("image".to_owned(), Json::str(journal::image_key(path))),
            ("caption".to_owned(), Json::str(g.text.trim())),
        ];
        if self.config.json.is_some() {
            fields.push(("json".to_owned(), answer_json(&g.text)));
        }
        fields.push(("tokens".to_owned(), Json::Int(g.tokens.len() as i128)));
        fields.push(("seconds".to_owned(), Json::Num((t.elapsed().as_secs_f64() * 1000.0).round() / 1000.0)));
        Json::Obj(fields)
    }

    /// Captions `todo` with up to n_seq of them decoded together: the images read and
    /// preprocessed on other threads into a bounded queue; as sequences free up, as many
    /// images encoded and their prompts prefilled together, each into a free sequence; every
    /// caption under way decoded a token a step in one call. Where the device is lost, the
    /// models are loaded again (`losses`) and the images under way captioned again.
    fn caption_batched(
        &self,
        d: &mut Describer,
        todo: &[&PathBuf],
        progress: &mut Progress,
        losses: &mut Losses,
    ) -> Result<(), CliError> {
        let preparer = d.preparer()?;
        let n_seq = d.text().options().n_seq;
        let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, PREPARE_THREADS);
        let next = AtomicUsize::new(0);
        std::thread::scope(|s| {
            let (tx, rx) = std::sync::mpsc::sync_channel(2 * n_seq);
            for _ in 0..workers {
                let (tx, next, preparer) = (tx.clone(), &next, &preparer);
                s.spawn(move || loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(path) = todo.get(i) else { break };
                    if tx.send((i, preparer.prepare(path))).is_err() {
                        break;
                    }
                });
            }
            drop(tx);
            // Dropped on any return: the workers' sends fail and they stop.
            let mut incoming = rx.into_iter();
            let tokenizer = Arc::clone(d.text().tokenizer());
            let mut batch = Batch::new(d.text(), &tokenizer);
            // Images to caption again (a lost device's), read again here; whether the readers
            // are done.
            let mut redo: Vec<(usize, Instant)> = Vec::new();
            let mut read_all = false;
            loop {
                // As many images as there are free sequences, encoded (several a vision run),
                // then their prompts prefilled together.
                let mut prepared = Vec::new();
                while prepared.len() < batch.room() {
                    let (i, p, t) = match redo.pop() {
                        Some((i, t)) => (i, preparer.prepare(todo[i]), t),
                        None => match incoming.next() {
                            Some((i, p)) => (i, p, Instant::now()),
                            None => {
                                read_all = true;
                                break;
                            }
                        },
                    };
                    match p {
                        Ok(p) => prepared.push(((i, t), p)),
                        Err(e) => progress.report(todo[i], Err(e), t)?,
                    }
                }
                // Errors are reported once the device is known not to be lost (then the images
                // are captioned again instead).
                let mut failed = Vec::new();
                let (tags, prepared): (Vec<_>, Vec<_>) = prepared.into_iter().unzip();
                let mut encoded = Vec::new();
                for ((i, t), image) in tags.into_iter().zip(d.encode_prepared(prepared, self.prompt, self.system)) {
                    match image {
                        Ok(image) => encoded.push(((i, t), [image])),
                        Err(e) => failed.push((i, t, e)),
                    }
                }
                let mut starts = Vec::with_capacity(encoded.len());
                for ((i, t), images) in &encoded {
                    match d.prompt(images, self.prompt, self.system) {
                        Ok((_, pieces)) => starts.push(Start { pieces, config: self.config.clone(), tag: (*i, *t) }),
                        Err(e) => failed.push((*i, *t, e)),
                    }
                }
                for started in batch.start_all(d.text_mut(), starts, &mut Quiet) {
                    match started {
                        Started::Running => {}
                        Started::Finished(Finished { tag: (i, t), generation }) => {
                            progress.report(todo[i], Ok(self.entry(todo[i], &generation, t)), t)?
                        }
                        Started::Failed((i, t), e) => failed.push((i, t, e)),
                    }
                }
                if !batch.is_empty() && !d.device_lost() {
                    match batch.step(d.text_mut(), &mut Quiet) {
                        Ok(Stepped { finished, .. }) => {
                            for Finished { tag: (i, t), generation } in finished {
                                progress.report(todo[i], Ok(self.entry(todo[i], &generation, t)), t)?;
                            }
                        }
                        Err(e) => {
                            let message = e.to_string();
                            for (i, t) in batch.abandon() {
                                failed.push((i, t, RuntimeError::Usage(message.clone())));
                            }
                        }
                    }
                }
                if d.device_lost() {
                    redo.extend(failed.into_iter().map(|(i, t, _)| (i, t)).chain(batch.abandon()));
                    *d = losses.recover(d, &format!("captioning a batch of {}", redo.len()))?;
                    batch = Batch::new(d.text(), &tokenizer);
                    continue;
                }
                for (i, t, e) in failed {
                    progress.report(todo[i], Err(e), t)?;
                }
                if batch.is_empty() && redo.is_empty() && read_all {
                    return Ok(());
                }
            }
        })
    }
}

/// Seconds left for `left` images, `finished` having taken `busy` seconds each from its start,
/// `sequences` captioned at once: the mean caption's time for each round of them. (Elapsed
/// time over images finished counted a batch of 30 captions ending together as 30 in a row:
/// "ETA 2 min" for a job of 3 s.)
fn eta(busy: f64, finished: usize, left: usize, sequences: usize) -> f64 {
    busy / finished.max(1) as f64 * left as f64 / sequences.max(1) as f64
}

/// `--shard` and `--shards`.
fn shard_flags(args: &mut Args) -> Result<Option<Shard>, CliError> {
    let spec = SHARD.string(args)?;
    let shards = SHARDS.string(args)?;
    let shards = match shards {
        None => None,
        Some(n) => Some(n.parse::<usize>().map_err(|_| CliError::usage(format!("--shards {n}: a number"))).and_then(
            |n| match (n, &spec) {
                (_, None) => Err(CliError::usage("--shards goes with --shard auto")),
                (0, _) => Err(CliError::usage("--shards 0: at least 1")),
                (n, _) => Ok(n),
            },
        )?),
    };
    spec.map(|spec| Shard::parse(&spec, shards, |name| std::env::var(name).ok()).map_err(CliError::usage)).transpose()
}

/// `--sidecar` and `--sidecar-mode`.
fn sidecar_flags(args: &mut Args) -> Result<Option<Sidecars>, CliError> {
    let format = SIDECAR.string(args)?;
    let mode = SIDECAR_MODE.string(args)?;
    let format = match format {
        None if mode.is_some() => return Err(CliError::usage("--sidecar-mode goes with --sidecar")),
        None => return Ok(None),
        Some(f) => {
            Format::parse(&f).ok_or_else(|| CliError::usage(format!("--sidecar {f}: one of {}", Format::NAMES)))?
        }
    };
    let mode = match mode {
        None => Mode::Skip,
        Some(m) => {
            Mode::parse(&m).ok_or_else(|| CliError::usage(format!("--sidecar-mode {m}: one of {}", Mode::NAMES)))?
        }
    };
    Ok(Some(Sidecars { format, mode }))
}

/// What a record's sidecar says: a JSON answer's "description" or "caption" string where it
/// has one (else the caption as written) and its "tags" strings.
fn sidecar_caption(entry: &Json) -> Caption {
    let answer = entry.get("json");
    let field = |key| match answer.and_then(|a| a.get(key)) {
        Some(Json::Str(s)) => Some(s.clone()),
        _ => None,
    };
    let text = field("description").or_else(|| field("caption"));
    let text = text.or_else(|| match entry.get("caption") {
        Some(Json::Str(s)) => Some(s.clone()),
        _ => None,
    });
    let tags = match answer.and_then(|a| a.get("tags")) {
        Some(Json::Arr(tags)) => tags
            .iter()
            .filter_map(|t| match t {
                Json::Str(s) => Some(s.clone()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    Caption { text: text.unwrap_or_default(), tags }
}

/// The process holding an output, as the system names it.
fn holder_name(who: Option<String>) -> String {
    who.unwrap_or_else(|| "another process".to_owned())
}

/// Threads reading and preprocessing images ahead of the model (at most).
const PREPARE_THREADS: usize = 4;

fn failure(path: &Path, message: &str) -> Json {
    Json::obj([("image", Json::str(journal::image_key(path))), ("error", Json::str(message))])
}

/// What a run did: captioned and failed in this run; skipped as captioned, or as failed, before.
#[derive(Default)]
struct Tally {
    done: usize,
    failed: usize,
    skipped: usize,
    failed_before: usize,
    seconds: f64,
    /// Left alone as their sidecar exists (--sidecar-mode skip).
    had_sidecar: usize,
    /// Captions decoded together.
    batch: usize,
}

impl Tally {
    fn summary(&self) -> String {
        let mut s = format!("hrx caption: {} captioned, {} failed, {} skipped", self.done, self.failed, self.skipped);
        if self.failed_before > 0 {
            s += &format!(", {} failed before and not retried (--retry-failed)", self.failed_before);
        }
        if self.had_sidecar > 0 {
            s += &format!(", {} with a sidecar already", self.had_sidecar);
        }
        // The rate counts captions only: failures are quick and would flatter it.
        if self.done > 0 && self.seconds > 0.0 {
            s += &format!("; {:.1} images/minute", self.done as f64 * 60.0 / self.seconds);
        }
        if self.batch > 0 {
            s += &format!("; batch {}", self.batch);
        }
        s
    }
}

/// "42 s", "52 min", "3 h 05 min".
fn duration(seconds: f64) -> String {
    let s = seconds.max(0.0).round() as u64;
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min", (s + 30) / 60),
        _ => format!("{} h {:02} min", s / 3600, s % 3600 / 60),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn durations_read_naturally() {
        assert_eq!(super::duration(41.6), "42 s");
        assert_eq!(super::duration(3100.0), "52 min");
        assert_eq!(super::duration(11_100.0), "3 h 05 min");
    }

    #[test]
    fn the_eta_counts_captions_made_together_once() {
        use super::eta;
        // 30 images in one batch of 30: the first ended after 3 s, the rest are as far along.
        assert!((eta(3.0, 1, 29, 30) - 2.9).abs() < 1e-9);
        // One at a time, 2 s each: 10 left, 20 s.
        assert!((eta(8.0, 4, 10, 1) - 20.0).abs() < 1e-9);
        // 32 at once, 1 s a caption, 900 left: 900 / 32 rounds.
        assert!((eta(100.0, 100, 900, 32) - 900.0 / 32.0).abs() < 1e-9);
        assert_eq!(eta(0.0, 0, 0, 0), 0.0);
    }
}
