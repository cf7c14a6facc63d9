//! `voxctl`: parses the command line and runs it on a Tokio runtime (see the library docs).

use std::process::ExitCode;

use clap::Parser as _;
use voxctl::{app, cli::Cli};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            voxctl::say!("voxctl: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    ExitCode::from(runtime.block_on(app::run(cli)))
}
