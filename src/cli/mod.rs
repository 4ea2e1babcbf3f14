//! The command line: one module per subcommand, each with its own `--help`.

pub mod args;
mod bench;
mod bench_batch;
mod bench_kernels;
mod caption;
mod describe;
mod doctor;
pub mod flags;
mod generate;
mod inspect;
mod model_defaults;
mod models;
mod plan;
mod report;
mod serve;
mod synth;
mod tokenize;

use crate::catalog::facts::Mismatch;
use crate::catalog::LoadError;
use crate::gguf::GgufError;
use crate::runtime::RuntimeError;
use args::{Args, UsageError};
use std::fmt;
use std::io::{self, Write};

/// A subcommand: its name, a one-line summary for `hrx --help`, its full help (built from the
/// flag table, `flags.rs`), its body.
pub struct Command {
    pub name: &'static str,
    pub summary: &'static str,
    pub help: fn() -> String,
    pub run: fn(Args, &mut dyn Write) -> Result<(), CliError>,
}

const COMMANDS: &[Command] = &[
    describe::COMMAND,
    caption::COMMAND,
    report::COMMAND,
    serve::COMMAND,
    generate::COMMAND,
    plan::COMMAND,
    inspect::COMMAND,
    tokenize::COMMAND,
    synth::COMMAND,
    bench::COMMAND,
    models::COMMAND,
    doctor::COMMAND,
];

const MAIN_HELP: &str = "\
hrx: describe images with Qwen3-VL on the GPU of small edge boxes

usage: hrx COMMAND [ARGS...]      hrx help COMMAND      hrx COMMAND --help";

/// Everything a command can fail with; `main` turns it into a message and an exit code.
#[derive(Debug)]
pub enum CliError {
    Usage {
        message: String,
        command: Option<&'static str>,
    },
    Gguf(GgufError),
    /// Writing the command's output.
    Io(io::Error),
    /// Something the command opens itself: a file it writes, the address it listens on.
    Os {
        what: String,
        source: io::Error,
    },
    /// Loading or running the model.
    Runtime(RuntimeError),
    /// The system models.toml exists but cannot be read or parsed.
    Catalog(LoadError),
    /// A file named as a models.toml entry's that is not that model.
    NotTheModel(Mismatch),
    /// A failure hrx itself describes (nothing to do...).
    Failed(String),
    /// No model given, and the default one is not installed: where to put it.
    NoModel(String),
    /// A failure already reported (e.g. per image): only the summary is printed.
    Quiet(String),
    /// A batch that finished with some items failed (each reported): exit code 3.
    Partial(String),
    /// What the command would write is another run's for now (a caption job's output): exit
    /// code 4.
    Busy(String),
}

impl CliError {
    pub fn usage(message: impl Into<String>) -> CliError {
        CliError::Usage { message: message.into(), command: None }
    }

    /// Exit code: 2 for a wrong command line, 3 for a batch finished with failures, 4 for an
    /// output another run holds, 1 for everything else.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage { .. } => 2,
            CliError::Partial(_) => 3,
            CliError::Busy(_) => 4,
            _ => 1,
        }
    }

    /// A write to a closed pipe (`hrx inspect f | head`) ends the program quietly.
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, CliError::Io(e) if e.kind() == io::ErrorKind::BrokenPipe)
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Usage { message, command: Some(c) } => {
                write!(f, "{message}\n(see `hrx {c} --help`)")
            }
            CliError::Usage { message, command: None } => write!(f, "{message}\n(see `hrx --help`)"),
            CliError::Gguf(e) => write!(f, "{e}"),
            CliError::Io(e) => write!(f, "{e}"),
            CliError::Os { what, source } => write!(f, "{what}: {source}"),
            CliError::Runtime(e) => write!(f, "{e}"),
            CliError::Catalog(e) => write!(f, "{e}"),
            CliError::NotTheModel(e) => write!(f, "{e}"),
            CliError::Failed(m)
            | CliError::NoModel(m)
            | CliError::Quiet(m)
            | CliError::Partial(m)
            | CliError::Busy(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for CliError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CliError::Gguf(e) => Some(e),
            CliError::Io(e) | CliError::Os { source: e, .. } => Some(e),
            CliError::Runtime(e) => Some(e),
            CliError::Catalog(e) => Some(e),
            CliError::NotTheModel(e) => Some(e),
            CliError::Usage { .. }
            | CliError::Failed(_)
            | CliError::NoModel(_)
            | CliError::Quiet(_)
            | CliError::Partial(_)
            | CliError::Busy(_) => None,
        }
    }
}

impl From<RuntimeError> for CliError {
    fn from(e: RuntimeError) -> Self {
        CliError::Runtime(e)
    }
}

impl CliError {
    /// An operating-system error on `what` (a path, an address).
    pub fn os(what: impl fmt::Display) -> impl FnOnce(io::Error) -> CliError {
        let what = what.to_string();
        move |source| CliError::Os { what, source }
    }
}

impl From<LoadError> for CliError {
    fn from(e: LoadError) -> Self {
        CliError::Catalog(e)
    }
}

impl From<Mismatch> for CliError {
    fn from(e: Mismatch) -> Self {
        CliError::NotTheModel(e)
    }
}

impl From<UsageError> for CliError {
    fn from(e: UsageError) -> Self {
        CliError::usage(e.0)
    }
}

impl From<GgufError> for CliError {
    fn from(e: GgufError) -> Self {
        CliError::Gguf(e)
    }
}

impl From<io::Error> for CliError {
    fn from(e: io::Error) -> Self {
        CliError::Io(e)
    }
}

fn main_help() -> String {
    let mut s = String::from(MAIN_HELP);
    s.push_str("\n\ncommands:\n");
    for c in COMMANDS {
        s.push_str(&format!("  {:<10} {}\n", c.name, c.summary));
    }
    s.push_str(
        "  help       show a command's help (hrx help env: the HRX_* environment variables)\n\n\
         environment: RUST_LOG=info|debug for logs; `hrx help env` lists the rest",
    );
    s
}

/// Runs the command line `argv` (without the program name), writing results to `out`.
pub fn run(argv: Vec<String>, out: &mut dyn Write) -> Result<(), CliError> {
    let mut argv = argv.into_iter();
    let Some(name) = argv.next() else {
        // A usage error (exit 2): scripts that forgot the command should notice.
        let commands: Vec<&str> = COMMANDS.iter().map(|c| c.name).collect();
        return Err(CliError::usage(format!("no command given: one of {}", commands.join(", "))));
    };
    let rest: Vec<String> = argv.collect();
    match name.as_str() {
        "-h" | "--help" => {
            writeln!(out, "{}", main_help())?;
            return Ok(());
        }
        "-V" | "--version" => {
            writeln!(out, "hrx {}", env!("CARGO_PKG_VERSION"))?;
            return Ok(());
        }
        "help" => {
            // `hrx help --help` and `hrx help help` are the main help too.
            let text = match rest.first().map(String::as_str) {
                None | Some("-h" | "--help" | "help") => main_help(),
                Some("env") => crate::settings::settings().table(),
                Some(c) => (find(c)?.help)(),
            };
            writeln!(out, "{text}")?;
            return Ok(());
        }
        _ => {}
    }
    let command = find(&name)?;
    let mut args = Args::new(rest.clone());
    if args.flag(&["-h", "--help"]) {
        writeln!(out, "{}", (command.help)())?;
        return Ok(());
    }
    (command.run)(args, out).map_err(|e| {
        // Without a model installed, the model is looked for before the options are read: a
        // misspelled option there is the news, not the missing model.
        let e = match (&e, unknown_in(&rest, &(command.help)())) {
            (CliError::NoModel(_), Some(unknown)) => CliError::usage(unknown),
            _ => e,
        };
        match e {
            CliError::Usage { message, command: None } => CliError::Usage { message, command: Some(command.name) },
            other => other,
        }
    })
}

/// The first option of `argv` that `help` (a command's --help) names nowhere, as an unknown
/// option with the nearest spelling it names. Negative numbers and text with spaces are
/// values, not options.
fn unknown_in(argv: &[String], help: &str) -> Option<String> {
    let known: Vec<&str> = help
        .split(|c: char| c.is_whitespace() || "[](),;:`'\"|".contains(c))
        .map(|word| word.split_once('=').map_or(word, |(name, _)| name))
        .filter(|word| {
            word.len() > 1
                && word.starts_with('-')
                && word[1..].starts_with(|c: char| c.is_ascii_alphabetic() || c == '-')
        })
        .chain(["-h", "--help"])
        .collect();
    argv.iter()
        .take_while(|a| *a != "--")
        .filter(|a| a.len() > 1 && a.starts_with('-') && a.parse::<f64>().is_err() && !a.contains(char::is_whitespace))
        .find(|a| !known.contains(&a.split_once('=').map_or(a.as_str(), |(name, _)| name)))
        .map(|a| args::unknown_option(a, &known))
}

/// Words people type for a command hrx names otherwise.
const OTHER_NAMES: &[(&str, &str)] = &[
    ("list", "`hrx models` lists the known models and which files are present"),
    ("ls", "`hrx models` lists the known models and which files are present"),
    ("pull", "hrx downloads nothing: `hrx models` names the files to fetch and where they go"),
    ("download", "hrx downloads nothing: `hrx models` names the files to fetch and where they go"),
    ("run", "`hrx describe IMAGE` describes an image; `hrx generate -p TEXT` answers a prompt"),
    ("chat", "`hrx generate -p TEXT` answers a prompt; `hrx serve` is a chat server"),
    ("server", "did you mean `hrx serve`?"),
    ("info", "`hrx doctor` shows the devices; `hrx inspect FILE` a model file"),
    ("version", "`hrx --version`"),
];

fn find(name: &str) -> Result<&'static Command, CliError> {
    if let Some(c) = COMMANDS.iter().find(|c| c.name == name) {
        return Ok(c);
    }
    let hint = match OTHER_NAMES.iter().find(|(other, _)| *other == name) {
        Some((_, hint)) => format!("; {hint}"),
        None => COMMANDS
            .iter()
            .map(|c| (args::edit_distance(name, c.name), c.name))
            .min()
            .filter(|(d, _)| *d <= 2)
            .map(|(_, c)| format!("; did you mean `hrx {c}`?"))
            .unwrap_or_default(),
    };
    Err(CliError::usage(format!("unknown command {name:?}{hint}")))
}
