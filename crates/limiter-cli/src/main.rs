//! The `limiter` binary: parses the command line and hands it to the library.

use std::process::ExitCode;

use clap::Parser;
use limiter_cli::cli::Cli;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match limiter_cli::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            // The message and its causes, each once.
            eprintln!("error: {}", failure.report());
            ExitCode::from(failure.exit_code())
        }
    }
}
