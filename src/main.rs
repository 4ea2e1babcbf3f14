//! The `hrx` binary: parse nothing here; run the command line and map errors to exit codes.

use std::io::{self, Write};
use std::process::ExitCode;

fn main() -> ExitCode {
    // Milliseconds in the log's time stamps: RUST_LOG=hrx=debug shows where a start-up goes.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"))
        .format_timestamp_millis()
        .init();
    // args() would panic on an argument that is not UTF-8; say which one instead.
    let argv: Result<Vec<String>, _> = std::env::args_os().skip(1).map(|a| a.into_string()).collect();
    let argv = match argv {
        Ok(v) => v,
        Err(bad) => {
            eprintln!("hrx: error: argument {bad:?} is not valid UTF-8");
            return ExitCode::from(2);
        }
    };
    let started = std::time::Instant::now();
    log::debug!("hrx started");
    let stdout = io::stdout();
    let mut out = stdout.lock();
    let result = hrx::cli::run(argv, &mut out).and_then(|()| out.flush().map_err(Into::into));
    // What a process's wall time holds beyond this is the loader's start and the exit.
    log::debug!("hrx finished after {:.3} s", started.elapsed().as_secs_f64());
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is_broken_pipe() => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hrx: error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
