//! `plaudit`: the command-line client. Parsing, running and rendering live in
//! `plaudit_client::cli`; this file only wires them to the process.

use clap::error::ErrorKind;
use clap::Parser;
use plaudit_client::cli::{self, Cli, Failure};
use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    let result = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt.block_on(cli::run(&cli)),
        Err(e) => Err(Failure {
            code: "Internal",
            message: format!("cannot start the runtime: {e}"),
            exit: cli::EXIT_FAILED,
        }),
    };
    let out = cli::render(cli.json, &result);
    // A closed stdout (e.g. `| head`) is not worth a panic.
    let _ = std::io::stdout().write_all(out.stdout.as_bytes());
    let _ = std::io::stderr().write_all(out.stderr.as_bytes());
    ExitCode::from(out.exit)
}

/// Help and version print as usual. A real usage error also becomes one JSON
/// object on stdout when `--json` was asked for, so scripts always get JSON.
fn usage_error(e: clap::Error) -> ExitCode {
    let informational = matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    );
    if !informational && std::env::args_os().skip(1).any(|a| a == "--json") {
        let f = Failure::usage(&e);
        println!("{}", cli::json::failure(&f));
        let _ = e.print();
        return ExitCode::from(f.exit);
    }
    e.exit()
}
