//! The `rankwatch` command: parses the command line and hands over to a command.

use anyhow::Context;
use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use rankwatch::config::FleetArgs;
use rankwatch::config::{EngineArgs, FileSettings, LogArgs, ServerArgs};
use rankwatch::demo::{self, DemoArgs};
use rankwatch::engine::EngineSettings;
use rankwatch::event::{format_rfc3339, NANOS_PER_SECOND};
use rankwatch::export::Report;
use rankwatch::fleet::{FleetMode, FleetSettings};
#[cfg(feature = "kafka")]
use rankwatch::kafka_check;
use rankwatch::loadgen::{self, LoadgenArgs};
use rankwatch::query::{self, QueryArgs, ReportFilter};
use rankwatch::replay::{self, LineNotice, ReplayOptions, ReplaySetup};
use rankwatch::serve;
use rankwatch::server::ServerSettings;
use std::future::Future;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
#[command(
    name = "rankwatch",
    version,
    about = "Evaluation sidecar for online recommenders"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the sidecar: gRPC ingest and query, /metrics, /healthz, /readyz.
    Serve(ServeArgs),
    /// Run the sidecar with built-in synthetic traffic from two models of different quality.
    Demo(DemoCommand),
    /// Send synthetic traffic to a running server; report events/s and ack latency.
    Loadgen(LoadgenArgs),
    /// Evaluate recorded logs (JSON Lines, `-` for standard input, .gz read transparently).
    Replay(ReplayArgs),
    /// Print the report of a running server (`Evaluation.GetMetrics`), since start or for one window.
    Query(QueryCommand),
    /// Check the Kafka topics and consumer group that fleet mode needs; exit 0 only when all holds.
    KafkaCheck(KafkaCheckCommand),
}

/// The engine's settings first in `--help`: a first run is about them.
#[derive(clap::Args)]
struct ServeArgs {
    #[command(flatten)]
    engine: EngineArgs,
    #[command(flatten)]
    server: ServerArgs,
}

/// `serve`'s settings with the demo's own defaults shown where they differ
/// (`with_quick_join`, and the first model as the control).
#[derive(clap::Args)]
#[command(
    mut_arg("attribution_window", |arg| arg.help("How long after an impression its interactions count [default: 10s]")),
    mut_arg("allowed_lateness", |arg| arg.help("How far the watermark trails the latest event time [default: 2s]")),
    mut_arg("control_model", |arg| arg.help("The model every other model on a surface is compared against (docs/SPEC.md §9) [default: the first of --models]")),
)]
struct DemoCommand {
    #[command(flatten)]
    demo: DemoArgs,
    #[command(flatten)]
    engine: EngineArgs,
    #[command(flatten)]
    server: ServerArgs,
}

#[derive(clap::Args)]
#[command(
    after_help = "Exit codes: 0 every log was read to its end; 1 nothing was replayed \
(bad settings); 2 the command line could not be parsed; 3 a log could not be read to its end (missing, unreadable, \
a truncated or corrupt .gz, a .gz that is not gzip, data after a gzip stream): the report printed covers the lines \
read before it, and standard error says what failed. Bad lines never change the exit code.",
    // Settings of serve's alone, taken (a shared config file may set them) but not shown.
    mut_arg("max_ack_rejections", |arg| arg.hide(true)),
    mut_arg("number_items", |arg| arg.hide(true)),
)]
struct ReplayArgs {
    /// Logs to replay, in order, as one stream.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Threads that parse and evaluate [default: the cores no other process is running on].
    #[arg(long, env = "RANKWATCH_THREADS",
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024))]
    threads: Option<usize>,
    #[command(flatten)]
    log: LogArgs,
    /// Estimate coverage from sketches past max_exposure_items, as serve
    /// does, instead of exactly: to see the sketches' error on a log.
    #[arg(long)]
    sketch_coverage: bool,
    #[command(flatten)]
    engine: EngineArgs,
}

#[derive(clap::Args)]
#[command(
    after_help = "Changes nothing. Exit codes: 0 every requirement holds (a missing state topic \
is created by the first consuming instance); 1 a requirement does not hold, or the broker cannot \
be asked; each problem is printed with the command that fixes it."
)]
struct KafkaCheckCommand {
    #[command(flatten)]
    engine: EngineArgs,
    #[command(flatten)]
    fleet: FleetArgs,
}

#[derive(clap::Args)]
struct QueryCommand {
    #[command(flatten)]
    query: QueryArgs,
    #[command(flatten)]
    filter: ReportFilter,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Table,
    Json,
}

/// mimalloc: allocation-heavy paths (decoding, opening lists) measured faster than with glibc's malloc.
/// Its 2.x line (Cargo feature `v2`): 3.x over-allocates a block whose size
/// is not a power of two whenever its page is full, which cost 7% more memory
/// per open impression.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Keeps the memory the allocator frees for its next blocks instead of
/// handing it back to the kernel. Replay frees each chunk's events as the
/// next one is parsed: handed back, every page was faulted in and zeroed
/// again, a fifth of a replay's time on two threads.
#[allow(unsafe_code)]
fn keep_freed_memory() {
    extern "C" {
        /// mimalloc's runtime option setter (mimalloc.h), linked in by the allocator.
        fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
    }
    /// `mi_option_purge_delay` in mimalloc 2.x's `mi_option_t`; -1: never purge.
    const PURGE_DELAY: std::ffi::c_int = 15;
    // SAFETY: sets one integer option; mimalloc reads options atomically.
    unsafe { mi_option_set(PURGE_DELAY, -1) }
}

/// The exit code of a replay that printed the report of the lines read
/// before a log could not be read to its end.
const REPLAY_INCOMPLETE: u8 = 3;

/// Writes a line to standard error, as `eprintln!` does, but drops it when
/// it cannot be written (whatever read standard error has gone): a report
/// on standard output must not be lost to a panic over a notice.
macro_rules! tell {
    ($($arg:tt)*) => {{
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// Misspelled `RANKWATCH_*` variables named before the rest are only counted.
const MISSPELLED_SHOWN: usize = 5;

/// Bad lines printed before the rest are only counted.
const BAD_LINES_SHOWN: u64 = 100;

/// Late impressions printed before the rest are only counted: a log whose
/// clock jumped back can hold millions.
const LATE_LINES_SHOWN: u64 = 10;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return command_line_error(&error),
    };
    let misspelled = rankwatch::config::suggest::misspelled_variables(setting_variables);
    for (given, meant) in misspelled.iter().take(MISSPELLED_SHOWN) {
        let given = given.escape_debug();
        tell!("rankwatch: the environment variable {given} is no setting and is ignored; did you mean {meant}?");
    }
    if misspelled.len() > MISSPELLED_SHOWN {
        let more = misspelled.len() - MISSPELLED_SHOWN;
        tell!("rankwatch: ... and {more} more RANKWATCH_* variable(s) close to a setting's name");
    }
    let result = match cli.command {
        Command::Serve(args) => run_serve(args),
        Command::Demo(args) => run_demo(args),
        Command::Loadgen(args) => run_loadgen(args),
        Command::Replay(args) => run_replay(args),
        Command::Query(args) => run_query(args),
        Command::KafkaCheck(args) => run_kafka_check(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) if error.is::<replay::ReplayError>() => {
            let message = message_of(&error);
            tell!("rankwatch: {message}; the report covers the lines read before it");
            ExitCode::from(REPLAY_INCOMPLETE)
        }
        Err(error) => {
            tell!("rankwatch: {}", message_of(&error));
            ExitCode::FAILURE
        }
    }
}

/// Every `RANKWATCH_*` environment variable that some command reads.
fn setting_variables() -> Vec<String> {
    fn add(command: &clap::Command, names: &mut Vec<String>) {
        let read = command.get_arguments().filter_map(|arg| arg.get_env());
        names.extend(read.filter_map(|name| name.to_str()).map(str::to_owned));
        command.get_subcommands().for_each(|sub| add(sub, names));
    }
    let mut names = vec!["RANKWATCH_LOG".to_owned()];
    add(&Cli::command(), &mut names);
    names
}

/// Prints what clap found wrong with the command line (or the help it was
/// asked for), and the exit code: 1 for a value that does not parse, as
/// for every bad setting, naming the environment variable it came from
/// when its flag was not given; clap's own otherwise (0 for help and the
/// version, 2 for a flag that does not exist).
fn command_line_error(error: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    let _ = error.print();
    match error.kind() {
        ErrorKind::InvalidValue | ErrorKind::ValueValidation | ErrorKind::InvalidUtf8 => {
            if let Some(variable) = variable_of(error) {
                tell!("rankwatch: the value came from the environment variable {variable}");
            }
            ExitCode::FAILURE
        }
        _ => ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(2)),
    }
}

/// The environment variable that gave the value `error` is about, when it
/// did: its flag has one, it is set, and the flag is not on the command line.
fn variable_of(error: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue};
    let Some(ContextValue::String(arg)) = error.get(ContextKind::InvalidArg) else {
        return None;
    };
    let flag = arg.split_whitespace().next()?;
    let long = flag.strip_prefix("--")?;
    let given = std::env::args().any(|a| a == flag || a.starts_with(&format!("{flag}=")));
    let command = <Cli as clap::CommandFactory>::command();
    let variable = command
        .get_subcommands()
        .flat_map(clap::Command::get_arguments)
        .filter(|a| a.get_long() == Some(long))
        .find_map(clap::Arg::get_env)?;
    (!given && std::env::var_os(variable).is_some())
        .then(|| variable.to_string_lossy().into_owned())
}

/// `error` and its causes as people read them ([`query::error_chain`]):
/// an error that quotes its cause, or one wrapped in an error of the same
/// words, as the gRPC transport's are, had been told twice ("transport
/// error: transport error").
fn message_of(error: &anyhow::Error) -> String {
    query::error_chain(error.as_ref())
}

/// Starts the log on standard error, filtered by `RANKWATCH_LOG` (`info`
/// when unset or empty): refused when the filter does not parse, and
/// warned of when it names no level for rankwatch's own log, which it
/// then turns off, errors included.
fn init_logging() -> anyhow::Result<()> {
    let filter = match std::env::var("RANKWATCH_LOG") {
        Err(std::env::VarError::NotPresent) => String::new(),
        Err(std::env::VarError::NotUnicode(_)) => anyhow::bail!("RANKWATCH_LOG is not UTF-8"),
        Ok(filter) => filter,
    };
    let filter = if filter.trim().is_empty() {
        "info"
    } else {
        filter.trim()
    };
    let parsed = tracing_subscriber::EnvFilter::builder()
        .parse(filter)
        .with_context(|| {
            format!("RANKWATCH_LOG={filter:?} is not a log filter: give a level (error, warn, info, debug, trace, off) or directives such as info,rankwatch=debug")
        })?;
    if !filter.split(',').any(names_rankwatch) {
        tell!("rankwatch: RANKWATCH_LOG={filter} turns rankwatch's own log off, errors included: it names no level (error, warn, info, debug, trace) for every target or for rankwatch");
    }
    tracing_subscriber::fmt()
        .with_env_filter(parsed)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        // A line that cannot be written (whatever read the server's log has
        // gone) is dropped: reporting the failure on standard error would
        // fail the same way and panic, stopping the engine.
        .log_internal_errors(false)
        .init();
    Ok(())
}

/// Whether a directive of a log filter applies to rankwatch's own log: a
/// bare level, one for every target (`[span]=level`), or one whose target
/// is rankwatch or one of its modules.
fn names_rankwatch(directive: &str) -> bool {
    let target = directive.split(['=', '[']).next().unwrap_or("").trim();
    target.is_empty()
        || target == "rankwatch"
        || target.starts_with("rankwatch::")
        || target
            .parse::<tracing_subscriber::filter::LevelFilter>()
            .is_ok()
}

/// Runs `command` on a new runtime, handing it the shutdown token that
/// SIGTERM or SIGINT cancels.
fn run_until_signal<T, F>(command: impl FnOnce(CancellationToken) -> F) -> anyhow::Result<T>
where
    F: Future<Output = anyhow::Result<T>>,
{
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let result = runtime.block_on(async {
        let shutdown = CancellationToken::new();
        tokio::spawn(cancel_on_signal(shutdown.clone()));
        command(shutdown).await
    });
    // The command is done, its state saved: what still runs is a call
    // waiting on the network (a broker's metadata waits up to 10 s), left
    // to end with the process rather than waited for.
    runtime.shutdown_timeout(STRAGGLERS);
    result
}

/// How long the tasks still running when a command is done may take to end.
const STRAGGLERS: std::time::Duration = std::time::Duration::from_millis(500);

/// Cancels `shutdown` on SIGTERM, SIGINT or SIGHUP (the terminal the
/// command runs in was closed: without it, the kernel's default ended the
/// process unsaved).
async fn cancel_on_signal(shutdown: CancellationToken) {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    let (terminate, hang_up) = {
        use tokio::signal::unix::SignalKind;
        (
            received(SignalKind::terminate(), "SIGTERM"),
            received(SignalKind::hangup(), "SIGHUP"),
        )
    };
    #[cfg(not(unix))]
    let (terminate, hang_up) = (std::future::pending::<()>(), std::future::pending::<()>());
    tokio::select! {
        _ = interrupt => tracing::info!("SIGINT: shutting down"),
        _ = terminate => tracing::info!("SIGTERM: shutting down"),
        _ = hang_up => tracing::info!("SIGHUP: shutting down"),
        _ = shutdown.cancelled() => {}
    }
    shutdown.cancel();
}

/// Returns once the signal `kind` (called `name`) is received; never, if
/// it cannot be listened for.
#[cfg(unix)]
async fn received(kind: tokio::signal::unix::SignalKind, name: &str) {
    match tokio::signal::unix::signal(kind) {
        Ok(mut signal) => {
            signal.recv().await;
        }
        Err(error) => {
            tracing::warn!(%error, "cannot listen for {name}");
            std::future::pending::<()>().await;
        }
    }
}

fn run_serve(args: ServeArgs) -> anyhow::Result<()> {
    init_logging()?;
    let file = FileSettings::load(args.engine.config.as_deref())?;
    let engine = EngineSettings::resolve(&args.engine, &file)?;
    let server = ServerSettings::resolve(&args.server, &file)?;
    let fleet = FleetSettings::resolve(&args.server.fleet, &file.fleet)?;
    run_until_signal(|shutdown| serve::serve(engine, server, fleet, shutdown, |_| {}))
}

fn run_demo(args: DemoCommand) -> anyhow::Result<()> {
    init_logging()?;
    let file = FileSettings::load(args.engine.config.as_deref())?;
    let engine = EngineSettings::resolve(&args.engine, &file)?.with_quick_join(&args.engine, &file);
    let server = ServerSettings::resolve(&args.server, &file)?;
    let fleet = FleetSettings::resolve(&args.server.fleet, &file.fleet)?;
    run_until_signal(|shutdown| demo::run(args.demo, engine, server, fleet, shutdown))
}

fn run_loadgen(args: LoadgenArgs) -> anyhow::Result<()> {
    init_logging()?;
    let tls = args.target.starts_with("https");
    let report =
        run_until_signal(|shutdown| async move { loadgen::run_until(&args, shutdown).await })
            .map_err(|error| {
                // What to change after a TLS mistake, as `query` says it.
                match rankwatch::query::tls_hint(&format!("{error:?}"), tls) {
                    Some(_) if !tls => error.context("hint: the server may speak TLS (its tls_cert is set); the load generator speaks plaintext gRPC only: point it at a server without TLS; or it closed the connection at one of its limits (max_grpc_connections: see its rankwatch_grpc_connections_*_total)"),
                    Some(hint) => error.context(format!("hint: {hint}")),
                    None => error,
                }
            })?;
    print_out(&format!("{report}\n"))
}

fn run_replay(args: ReplayArgs) -> anyhow::Result<()> {
    keep_freed_memory();
    let file = FileSettings::load(args.engine.config.as_deref())?;
    let settings = EngineSettings::resolve(&args.engine, &file)?;
    // Threads asked for: the machine's load is not looked at.
    let mut options = args
        .threads
        .map_or_else(ReplayOptions::default, ReplayOptions::on_threads);
    options.max_line_bytes = args.log.max_line_bytes(&file)?;
    let bar = if std::io::stderr().is_terminal() {
        let bar = ProgressBar::new(replay::total_bytes(&args.files));
        bar.set_style(
            ProgressStyle::with_template(
                "{bar:40} {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} eta {eta}",
            )
            .context("progress bar template")?,
        );
        bar
    } else {
        ProgressBar::hidden()
    };
    let mut setup = ReplaySetup::new(&settings);
    if args.sketch_coverage {
        setup.join.coverage = settings.coverage_mode();
    }
    let (mut bad_lines, mut late_lines) = (0u64, 0u64);
    let slack = settings.attribution_window + settings.allowed_lateness;
    let replayed = replay::replay(
        &args.files,
        setup,
        options,
        |bytes| bar.set_position(bytes),
        |noticed| {
            let (seen, shown) = match noticed.what {
                LineNotice::Rejected(_) => (&mut bad_lines, BAD_LINES_SHOWN),
                LineNotice::Late { .. } => (&mut late_lines, LATE_LINES_SHOWN),
            };
            *seen += 1;
            if *seen <= shown {
                let place = format!("{}:{}", replay::shown(noticed.path), noticed.line);
                bar.suspend(|| tell!("{place}: {}", line_notice(&noticed.what, slack)));
            }
        },
    );
    bar.finish_and_clear();
    if bad_lines > BAD_LINES_SHOWN {
        tell!(
            "... {} more bad lines (counted under `rejected`)",
            bad_lines - BAD_LINES_SHOWN
        );
    }
    if late_lines > LATE_LINES_SHOWN {
        tell!(
            "... {} more late impressions (counted under `late`)",
            late_lines - LATE_LINES_SHOWN
        );
    }
    match replayed {
        Ok(replayed) => {
            if let Some(far) = &replayed.far_ahead {
                tell!("{}", far_ahead_notice(far));
            }
            if let Some(unseen) = replayed.report.control_unseen("") {
                tell!("rankwatch: {unseen}");
            }
            print_report(&replayed.report, args.format)
        }
        Err(unread) => {
            print_report(&unread.report, args.format)?;
            Err(unread.into())
        }
    }
}

/// What a replay says of a line in no figure; `slack` is attribution
/// window + allowed lateness.
fn line_notice(what: &LineNotice<'_>, slack: std::time::Duration) -> String {
    match what {
        LineNotice::Rejected(rejection) => rejection.to_string(),
        LineNotice::Late { time, latest } => format!(
            "late: the impression's time, {}, is at least attribution window + allowed lateness ({}) before the latest event time then, {}: its window had closed when it came, so it is counted under `late` and in no figure",
            format_rfc3339(*time),
            humantime::format_duration(slack),
            format_rfc3339(*latest),
        ),
    }
}

/// What a replay says of an event that moved `T` far ahead of later events.
fn far_ahead_notice(far: &replay::FarAhead) -> String {
    let by = std::time::Duration::from_secs(far.by / NANOS_PER_SECOND as u64);
    format!(
        "rankwatch: {}:{}: its time, {}, moved the latest event time {} ahead, and {} later events were older than it by more than attribution window + allowed lateness: lists shown before it closed when it came, and those events came late for their lists. If that time is wrong, fix or drop the line",
        replay::shown(&far.path),
        far.line,
        format_rfc3339(far.time),
        humantime::format_duration(by),
        far.behind,
    )
}

fn run_query(args: QueryCommand) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let report = runtime.block_on(query::fetch(&args.query))?;
    args.filter.check(&report).map_err(anyhow::Error::msg)?;
    let kept = args.filter.apply(report.clone());
    let scope = args
        .query
        .window
        .as_ref()
        .map(|w| format!(" in the last {w}"));
    let unseen = report.control_unseen(scope.as_deref().unwrap_or_default());
    for unmatched in args
        .filter
        .unmatched(&report, &kept)
        .into_iter()
        .chain(unseen)
    {
        tell!("rankwatch: {unmatched}");
    }
    if let (Format::Table, Some(beyond)) = (args.format, args.filter.beyond_the_table()) {
        tell!("rankwatch: {beyond}");
    }
    if let (true, Some(window)) = (report.groups.is_empty(), &args.query.window) {
        tell!(
            "rankwatch: no list was finalized in the last {window} ({} impressions received since start); without --window, query reports every list since start",
            report.counters.impressions
        );
    } else if let (true, None, received @ 1..) = (
        report.groups.is_empty(),
        &report.pending,
        report.counters.impressions,
    ) {
        tell!(
            "rankwatch: no group holds figures: the {received} lists received since start were finalized, and their groups retired after group_idle_timeout without a new list"
        );
    } else if report.groups.is_empty() {
        let wait = report.config.attribution_window_s + report.config.allowed_lateness_s;
        let when = match report.pending {
            Some(pending) => format!(
                "{} lists are open; the first is finalized in about {:.0} s",
                pending.open_impressions, pending.seconds_to_first_finalization
            ),
            None => format!("{} impressions received", report.counters.impressions),
        };
        tell!(
            "rankwatch: no list is finalized yet ({when}): a list is evaluated once attribution window + allowed lateness ({wait} s) have passed after it was shown"
        );
    }
    print_report(&kept, args.format)
}

fn run_kafka_check(mut args: KafkaCheckCommand) -> anyhow::Result<()> {
    let file = FileSettings::load(args.engine.config.as_deref())?;
    let engine = EngineSettings::resolve(&args.engine, &file)?;
    if args.fleet.kafka_mode.is_none() && file.fleet.kafka_mode.is_none() {
        args.fleet.kafka_mode = Some(FleetMode::Consume);
    }
    let Some(fleet) = FleetSettings::resolve(&args.fleet, &file.fleet)? else {
        anyhow::bail!("no fleet settings");
    };
    // Without Kafka, resolving fleet settings has refused already.
    #[cfg(not(feature = "kafka"))]
    let _ = (fleet, engine);
    #[cfg(feature = "kafka")]
    {
        let checked = run_until_signal(|_| async move {
            kafka_check::check(&fleet, engine.attribution_window, engine.allowed_lateness).await
        })?;
        print_out(&checked.text)?;
        if !checked.ok {
            anyhow::bail!("fleet mode's requirements do not hold (see PROBLEM above)");
        }
    }
    Ok(())
}

fn print_report(report: &Report, format: Format) -> anyhow::Result<()> {
    match format {
        Format::Json => print_out(&format!("{}\n", serde_json::to_string_pretty(report)?)),
        Format::Table => print_out(&report.to_table()),
    }
}

/// Writes `text` to standard output. A reader that went away (`| head`)
/// ends the output quietly, as it does for other command-line tools.
fn print_out(text: &str) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(error) if error.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(error).context("writing to standard output")
        }
        _ => Ok(()),
    }
}
