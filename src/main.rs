//! The `rankwatch` command: parses the command line and hands over to a command.

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use rankwatch::config::{EngineArgs, EngineSettings, FileSettings};
use rankwatch::replay::{self, ReplayOptions};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "rankwatch", version, about = "Evaluation sidecar for online recommenders")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Evaluate recorded logs (JSON Lines, `-` for standard input, .gz read transparently).
    Replay(ReplayArgs),
}

#[derive(clap::Args)]
struct ReplayArgs {
    /// Logs to replay, in order, as one stream.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Threads that parse lines [default: the number of cores].
    #[arg(long, env = "RANKWATCH_THREADS")]
    threads: Option<usize>,
    #[command(flatten)]
    engine: EngineArgs,
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Table,
    Json,
}

/// Bad lines printed before the rest are only counted.
const BAD_LINES_SHOWN: u64 = 100;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Replay(args) => run_replay(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("rankwatch: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run_replay(args: ReplayArgs) -> anyhow::Result<()> {
    let file = FileSettings::load(args.engine.config.as_deref())?;
    let settings = EngineSettings::resolve(&args.engine, &file)?;
    let mut options = ReplayOptions::default();
    if let Some(threads) = args.threads {
        options.threads = threads.max(1);
    }
    let bar = if std::io::stderr().is_terminal() {
        let bar = ProgressBar::new(replay::total_bytes(&args.files));
        bar.set_style(
            ProgressStyle::with_template("{bar:40} {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} eta {eta}")
                .context("progress bar template")?,
        );
        bar
    } else {
        ProgressBar::hidden()
    };
    let mut bad_lines = 0u64;
    let report = replay::replay(
        &args.files,
        &settings,
        options,
        |bytes| bar.set_position(bytes),
        |bad| {
            bad_lines += 1;
            if bad_lines <= BAD_LINES_SHOWN {
                bar.suspend(|| eprintln!("{}:{}: {}", bad.path.display(), bad.line, bad.rejection));
            }
        },
    )?;
    bar.finish_and_clear();
    if bad_lines > BAD_LINES_SHOWN {
        eprintln!("... {} more bad lines (counted under `rejected`)", bad_lines - BAD_LINES_SHOWN);
    }
    match args.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        Format::Table => print!("{}", report.to_table()),
    }
    Ok(())
}
