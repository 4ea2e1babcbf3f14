//! The model's thread: it owns the describer and runs the chat requests on the model together,
//! each in a sequence of its own (runtime::batch). Between decode steps it takes the requests
//! that arrived while a sequence is free (their images encoded, their prompts prefilled
//! together), then
//! decodes a token of every request under way in one call; each request's text goes to its
//! connection's thread as it becomes final, and its answer when it ends.
//!
//! A connection that stops reading holds its sequence still (its events stop being made once
//! [`MAX_BEHIND`] wait to be written) without holding the others up; one that goes away, or
//! stopped reading past the send timeout, ends its request at the next step.

use super::http::HttpError;
use super::openai::ChatImage;
use crate::runtime::batch::{Batch, Finished, Listener, Start, Started, Stepped, Turn};
use crate::runtime::describe::{Describer, EncodedImage};
use crate::runtime::generate::{Delta, GenerateConfig, Generation};
use crate::runtime::recover::Losses;
use crate::runtime::sampler::TokenLogprob;
use std::ops::ControlFlow;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;

/// What `/health` says.
#[derive(Clone, Debug)]
pub enum Health {
    /// Serving, on this backend.
    Serving(String),
    /// The device was lost: the models are being loaded again (said how).
    Recovering(String),
    /// They could not be loaded again (why): chat requests fail.
    Failed(String),
}

/// What the model's thread needs of the server: its requests' images encoded, `/health` told,
/// and the requests it ends for a lost device counted.
pub trait Host: Sync {
    /// `images` of a request whose prompt's template ids are `prompt`, read, sized and encoded
    /// on `d`.
    fn encode(&self, d: &mut Describer, prompt: &[u32], images: &[ChatImage]) -> Result<Vec<EncodedImage>, HttpError>;
    fn set_health(&self, health: Health);
    /// A request got a 503: the device was lost under it.
    fn lost_request(&self);
}

/// A chat request for the model: its conversation, images and settings, where its events go,
/// and how its reader is doing.
pub struct Job {
    /// The chat template's ids of its conversation (one image pad per image), counted by the
    /// connection's thread: the model's never tokenizes a request.
    prompt: Vec<u32>,
    images: Vec<ChatImage>,
    config: GenerateConfig,
    events: Sender<Event>,
    reader: Arc<Reader>,
}

/// What a connection's thread tells the model's of the client reading a request's answer.
#[derive(Default)]
struct Reader {
    /// The client went away or stopped reading: the request ends.
    gone: AtomicBool,
    /// Events sent and not yet written to the client.
    behind: AtomicUsize,
}

impl Reader {
    /// Ends the request at the model's next step.
    fn leave(&self) {
        self.gone.store(true, Ordering::SeqCst);
    }

    /// An event was taken off the channel and written.
    fn caught_up(&self) {
        let _ = self.behind.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
    }
}

/// What the model's thread sends a request's connection.
enum Event {
    /// Text that became final (often empty while a character or a stop string is incomplete)
    /// and the logprob entry of the token just generated, if asked for (none with the last).
    Text { text: String, logprob: Option<TokenLogprob> },
    /// The request ended: its answer, or why there is none.
    Done(Result<Answer, HttpError>),
}

/// A request's answer: its prompt's tokens and what was generated.
pub struct Answer {
    pub prompt_tokens: usize,
    pub generation: Generation,
}

/// Events a sequence may have waiting to be written before it is held.
pub const MAX_BEHIND: usize = 32;

/// How long the thread waits, when every request under way is held, before it looks again.
const HELD_WAIT: Duration = Duration::from_millis(2);

/// A request in a sequence: where its events go and its reader.
struct Tag {
    events: Sender<Event>,
    reader: Arc<Reader>,
    prompt_tokens: usize,
}

/// The requests' readers, as the batch asks of them.
struct Readers;

impl Listener<Tag> for Readers {
    fn turn(&mut self, tag: &Tag) -> Turn {
        if tag.reader.gone.load(Ordering::SeqCst) {
            Turn::Cancel
        } else if tag.reader.behind.load(Ordering::SeqCst) >= MAX_BEHIND {
            Turn::Hold
        } else {
            Turn::Step
        }
    }

    fn text(&mut self, tag: &Tag, delta: &Delta) -> ControlFlow<()> {
        tag.reader.behind.fetch_add(1, Ordering::SeqCst);
        let event = Event::Text { text: delta.text.to_owned(), logprob: delta.logprob.cloned() };
        if tag.events.send(event).is_err() || tag.reader.gone.load(Ordering::SeqCst) {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }
}

/// Runs the requests `jobs` brings on `d` (whose n_seq sequences they share) until every
/// sender of jobs is gone. Where `d`'s device is lost, the requests under way get a 503 and the
/// models are loaded again (`runtime::recover`) while `/health` says so; the thread ends only
/// where that fails on the CPU too.
pub fn run(mut d: Describer, jobs: &Receiver<Job>, app: &dyn Host) {
    let tokenizer = Arc::clone(d.text().tokenizer());
    let mut batch = Batch::new(d.text(), &tokenizer);
    let mut losses = Losses::default();
    // A request taken while every request under way was held, started at the loop's next turn.
    let mut waiting: Option<Job> = None;
    loop {
        // The requests that arrived, as many as there are free sequences, started together.
        let mut arrived = Vec::new();
        while arrived.len() < batch.room() {
            let job = match waiting.take() {
                Some(job) => job,
                None if batch.is_empty() && arrived.is_empty() => match jobs.recv() {
                    Ok(job) => job,
                    Err(_) => return,
                },
                None => match jobs.try_recv() {
                    Ok(job) => job,
                    Err(_) => break,
                },
            };
            arrived.push(job);
        }
        if !arrived.is_empty() {
            // A panic (a bug) fails those requests, not the server: every request starts a
            // new session, so the model is still good (the hook has logged it).
            let _ = panic::catch_unwind(AssertUnwindSafe(|| start(app, &mut d, &mut batch, arrived)));
        }
        if d.device_lost() && !recover(app, &mut d, &mut batch, &mut losses) {
            return;
        }
        if batch.is_empty() {
            continue;
        }
        let stepped = match panic::catch_unwind(AssertUnwindSafe(|| batch.step(d.text_mut(), &mut Readers))) {
            Ok(stepped) => stepped.map_err(HttpError::runtime),
            Err(_) => Err(HttpError::new(500, "internal error: a decode step failed (see the server's log)")),
        };
        match stepped {
            Ok(Stepped { finished, decoded }) => {
                finished.into_iter().for_each(answer);
                // Every reader is behind: wait for one, or for a new request.
                if decoded == 0 {
                    match waiting {
                        None => waiting = jobs.recv_timeout(HELD_WAIT).ok(),
                        Some(_) => std::thread::sleep(HELD_WAIT),
                    }
                }
            }
            Err(e) => {
                for tag in batch.abandon() {
                    fail(app, &d, &tag.events, e.clone());
                }
            }
        }
        if d.device_lost() && !recover(app, &mut d, &mut batch, &mut losses) {
            return;
        }
    }
}

/// After `d`'s device was lost: the requests still in sequences get a 503 to try again, and
/// the models are loaded again while `/health` says so. False where that failed (the thread
/// ends; requests then get a 500).
fn recover(app: &dyn Host, d: &mut Describer, batch: &mut Batch<Tag>, losses: &mut Losses) -> bool {
    say_recovering(app, d);
    for tag in batch.abandon() {
        fail(app, d, &tag.events, lost_device());
    }
    match losses.recover(d, "serving chat requests") {
        Ok(reopened) => {
            *d = reopened;
            app.set_health(Health::Serving(d.text().backend().describe()));
            true
        }
        Err(e) => {
            log::error!("hrx serve: the models could not be loaded again ({e}); chat requests fail from now on");
            app.set_health(Health::Failed(format!("the models could not be loaded again after a device loss: {e}")));
            false
        }
    }
}

/// Encodes the images of each job, then prefills their prompts together, each into a free
/// sequence; says why not, or the answer when its first token ends it, to each connection.
fn start(app: &dyn Host, d: &mut Describer, batch: &mut Batch<Tag>, jobs: Vec<Job>) {
    let mut encoded = Vec::with_capacity(jobs.len());
    for Job { prompt, images, config, events, reader } in jobs {
        match app.encode(d, &prompt, &images) {
            Ok(images) => encoded.push((prompt, images, config, events, reader)),
            Err(e) => fail(app, d, &events, e),
        }
    }
    let mut starts = Vec::with_capacity(encoded.len());
    for (prompt, images, config, events, reader) in &encoded {
        match d.prompt_counted(prompt, images) {
            Ok((ids, pieces)) => {
                let tag = Tag { events: events.clone(), reader: Arc::clone(reader), prompt_tokens: ids.len() };
                starts.push(Start { pieces, config: config.clone(), tag });
            }
            Err(e) => fail(app, d, events, HttpError::runtime(e)),
        }
    }
    let started = batch.start_all(d.text_mut(), starts, &mut Readers);
    // A prefill that lost the device failed every prompt of it (its error told as text).
    let lost = d.device_lost().then(lost_device);
    for started in started {
        match started {
            Started::Running => {}
            Started::Finished(finished) => answer(finished),
            Started::Failed(tag, e) => {
                let e = lost.clone().unwrap_or_else(|| HttpError::runtime(e));
                fail(app, d, &tag.events, e);
            }
        }
    }
}

/// The answer to a request the device's loss ended: try again once the model is loaded again.
fn lost_device() -> HttpError {
    HttpError::new(503, "the device was lost; the model is being loaded again, try again").with_retry_after(2)
}

/// Ends a request with error `e`. Where `d`'s device was lost, `/health` says first that the
/// models are being loaded again: its client may ask the moment the 503 arrives.
fn fail(app: &dyn Host, d: &Describer, events: &Sender<Event>, e: HttpError) {
    if d.device_lost() {
        say_recovering(app, d);
        if e.status == 503 {
            app.lost_request();
        }
    }
    let _ = events.send(Event::Done(Err(e)));
}

/// `/health` from now on: `d`'s device was lost, the models are being loaded again.
fn say_recovering(app: &dyn Host, d: &Describer) {
    let device = d.text().backend().describe();
    app.set_health(Health::Recovering(format!("{device} was lost; the models are being loaded again")));
}

/// Sends a request that ended its answer.
fn answer(f: Finished<Tag>) {
    let Finished { tag, generation } = f;
    let _ = tag.events.send(Event::Done(Ok(Answer { prompt_tokens: tag.prompt_tokens, generation })));
}

/// A chat request on the model's thread as its connection follows it: the events of its
/// answer as they come, and word back of how the client reads them. Dropped before the end (a
/// connection thread that failed), it ends the request, and the model frees its sequence.
pub struct Following {
    events: Receiver<Event>,
    reader: Arc<Reader>,
}

impl Following {
    /// Hands the request to the model's thread.
    pub fn start(
        jobs: &Sender<Job>,
        prompt: Vec<u32>,
        images: Vec<ChatImage>,
        config: GenerateConfig,
    ) -> Result<Following, HttpError> {
        let (events, incoming) = mpsc::channel();
        let reader = Arc::new(Reader::default());
        let job = Job { prompt, images, config, events, reader: Arc::clone(&reader) };
        jobs.send(job).map_err(|_| model_stopped())?;
        Ok(Following { events: incoming, reader })
    }

    /// Takes the answer's events: `on_text` gets each text as it comes, until it breaks (the
    /// client is gone: the request ends at the model's next step, and the events still on the
    /// way are dropped); then the answer.
    pub fn answer(
        self,
        mut on_text: impl FnMut(&str, Option<&TokenLogprob>) -> ControlFlow<()>,
    ) -> Result<Answer, HttpError> {
        let mut reading = true;
        loop {
            match self.events.recv() {
                Ok(Event::Text { text, logprob }) => {
                    if reading && on_text(&text, logprob.as_ref()).is_break() {
                        reading = false;
                        self.reader.leave();
                    }
                    self.reader.caught_up();
                }
                Ok(Event::Done(answer)) => return answer,
                Err(_) => return Err(model_stopped()),
            }
        }
    }
}

impl Drop for Following {
    fn drop(&mut self) {
        self.reader.leave();
    }
}

/// The answer when the model's thread dropped a request without an answer (a panic, which
/// its hook logged) or is gone.
fn model_stopped() -> HttpError {
    HttpError::new(500, "internal error: the model's thread failed on this request (see the server's log)")
}
