//! `hrx report CAPTIONS.jsonl -o REPORT.html`: the review page of a caption job's output.

use super::flags::{Flag, Help};
use super::{CliError, Command};
use crate::caption::report::{self, Summary};
use crate::cli::args::Args;
use std::io::Write;
use std::path::{Path, PathBuf};

fn help() -> String {
    Help {
        title: "hrx report: a page to review a caption job's results, pictures beside captions",
        usage: "hrx report CAPTIONS.jsonl -o REPORT.html",
        about: "Reads the JSON Lines of `hrx caption` and writes one HTML file that opens from the disk\n\
                with no server and loads nothing from anywhere: a grid of thumbnails (made from the\n\
                images where they are now, embedded) each with its caption (a --json-schema answer's\n\
                fields as a list), the failures with their reasons, a filter box, and the counts.\n\
                Each image as last recorded: a caption after an error (--retry-failed) wins.\n\
                `hrx caption ... --report REPORT.html` writes the same after its run, with the run's\n\
                captions a minute and device.",
        options: vec![OUTPUT.help("the HTML file to write (replaced whole, never left half written)")],
        footer: "example:\n  hrx report /var/lib/hrx/captions.jsonl -o /tmp/captions.html",
    }
    .render()
}

const OUTPUT: Flag = Flag { names: &["-o", "--output"], value: "FILE" };

pub const COMMAND: Command =
    Command { name: "report", summary: "write an HTML page of a caption job's results", help, run };

fn run(mut args: Args, out: &mut dyn Write) -> Result<(), CliError> {
    let output = OUTPUT.string(&mut args)?.ok_or_else(|| CliError::usage("report needs -o REPORT.html"))?;
    let inputs = args.finish()?;
    let [journal] = inputs.as_slice() else {
        return Err(CliError::usage("report takes one CAPTIONS.jsonl"));
    };
    let n = write(Path::new(journal), &PathBuf::from(&output), &Summary::default())?;
    writeln!(out, "hrx report: wrote {output}: {n} images")?;
    Ok(())
}

/// The report of the journal at `journal` into `output`; how many images it shows.
pub(super) fn write(journal: &Path, output: &Path, summary: &Summary) -> Result<usize, CliError> {
    let records = report::read_journal(journal).map_err(CliError::os(journal.display()))?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    report::write(&records, summary, &journal.display().to_string(), output, threads)
        .map_err(CliError::os(output.display()))?;
    Ok(records.len())
}
