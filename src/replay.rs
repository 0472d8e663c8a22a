//! Offline evaluation of a recorded log with the same engine as `serve`.
//!
//! Lines are read chunk by chunk, parsed and validated in parallel, handed
//! out in file order to the shards of a [`ShardedEngine`] as each run of
//! them is parsed, and applied by the shards in parallel while the next
//! chunk is read: the report is that of one engine, and does not depend on
//! the thread count or the chunk size.

use crate::engine::EngineSettings;
use crate::event::{json::parse_line, Nanos, Reason, Rejection, Validator};
use crate::export::{Report, ReportConfig};
use crate::join::{Batch, EventAt, JoinSettings, Parsed, Router, ShardedEngine};
use crate::metrics::{CoverageMode, ListEvaluator};
use std::fs::File;
use std::io::{self, Read, Seek};
use std::path::{Path, PathBuf};

mod gzip;

/// A log that could not be read to its end (a bad line is not an error):
/// the report of every line before the failure, and what failed.
#[derive(Debug, thiserror::Error)]
#[error("cannot read {}{}", shown(path), after_line(*line))]
pub struct ReplayError {
    path: PathBuf,
    /// The last line of `path` read whole and evaluated (0: none).
    line: u64,
    source: io::Error,
    /// The report of the lines read before the failure.
    pub report: Box<Report>,
}

/// A log's path as messages print it: a terminal acts on no character of it.
pub fn shown(path: &Path) -> String {
    crate::export::printable(&path.to_string_lossy()).into_owned()
}

/// Where in a log reading stopped, for [`ReplayError`]'s message.
fn after_line(line: u64) -> String {
    match line {
        0 => String::new(),
        line => format!(" past its line {line}"),
    }
}

/// A log that could not be read to its end, before the report is made.
struct Unread {
    path: PathBuf,
    line: u64,
    source: io::Error,
}

/// What a replay evaluates with, built by whoever resolved the settings.
pub struct ReplaySetup {
    /// The join, with no rolling windows.
    pub join: JoinSettings,
    /// The per-list metrics.
    pub evaluator: ListEvaluator,
    /// The validator, without a wall clock.
    pub validator: Validator,
    /// The settings the report prints.
    pub report: ReportConfig,
}

impl ReplaySetup {
    /// What `settings` evaluate a log with: no rolling windows, no wall
    /// clock, exact coverage, and item hashes in open lists, not numbers:
    /// a replay's memory is bounded by its open lists either way, and it
    /// would spend a fifth more time looking them up.
    pub fn new(settings: &EngineSettings) -> Self {
        let mut join = settings.join(&[]);
        join.number_items = false;
        if join.coverage != CoverageMode::Off {
            join.coverage = CoverageMode::Exact;
        }
        Self {
            join,
            evaluator: settings.evaluator(),
            validator: settings.validator(None),
            report: settings.report_config(),
        }
    }
}

/// How a replay runs; none of it changes the report (but for lines longer than `max_line_bytes`).
#[derive(Clone, Copy, Debug)]
pub struct ReplayOptions {
    /// Threads that parse, validate and evaluate.
    pub threads: usize,
    /// Lines read and parsed together, at most: a chunk also ends once its
    /// lines hold 4 MiB.
    pub chunk_lines: usize,
    /// Longest line read: a longer one is rejected as `line_too_long`, and
    /// skipped without being held.
    pub max_line_bytes: usize,
}

/// Counts the bytes read through it, for progress on compressed logs.
struct Counted<R> {
    inner: R,
    read: std::rc::Rc<std::cell::Cell<u64>>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.set(self.read.get() + n as u64);
        Ok(n)
    }
}

/// A log file whose end is checked: one that shrank while it was read (a
/// rotation that copies and truncates it in place) fails there, instead of
/// ending as if the log were whole, whether it was cut before or past
/// where reading had come to. A pipe or a device named as the log has no
/// length to check: it ends where its reads do.
struct Unshrunk {
    file: File,
    /// The file's length when it was opened, or later when it grew; none
    /// when it is not a regular file.
    longest: Option<u64>,
}

impl Unshrunk {
    fn open(path: &Path) -> io::Result<Self> {
        Self::of(File::open(path)?)
    }

    /// Standard input: a file redirected in (`< log`) is checked as one
    /// opened by name is.
    fn stdin() -> io::Result<Self> {
        use std::os::fd::AsFd;
        Self::of(File::from(io::stdin().as_fd().try_clone_to_owned()?))
    }

    /// `file`, whose end is checked if it is a regular file.
    fn of(file: File) -> io::Result<Self> {
        let metadata = file.metadata()?;
        let longest = metadata.is_file().then_some(metadata.len());
        Ok(Self { file, longest })
    }
}

impl Read for Unshrunk {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read(buf)?;
        let Some(longest) = self.longest else {
            return Ok(n);
        };
        if n == 0 && !buf.is_empty() {
            let (len, offset) = (self.file.metadata()?.len(), self.file.stream_position()?);
            let was = longest.max(offset);
            // A file that never had a length, such as /proc's, has not shrunk.
            let sized = longest > 0 || len > 0;
            if sized && len < was {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "the file shrank from {was} to {len} bytes while it was read, up to its byte {offset} (truncated in place, by a log rotation perhaps)"
                    ),
                ));
            }
            self.longest = Some(len);
        }
        Ok(n)
    }
}

impl ReplayOptions {
    /// The defaults, on `threads` threads (at least 1).
    pub fn on_threads(threads: usize) -> Self {
        let threads = threads.max(1);
        Self {
            threads,
            // On several threads about 3 MB of log: each chunk starts threads
            // to parse and apply it and ends waiting for the last of them.
            // On one, about 800 KB, which stays in the cache from parsing to
            // applying (1M events: 0.77 -> 0.69 s; 5M: 3.49 -> 3.37 s; two
            // threads were no faster with chunks that small).
            chunk_lines: if threads == 1 { 4_096 } else { 16_384 },
            max_line_bytes: crate::config::defaults::MAX_LINE_BYTES,
        }
    }
}

impl Default for ReplayOptions {
    /// On the cores no other process is running on ([`idle_cores`]).
    fn default() -> Self {
        Self::on_threads(idle_cores())
    }
}

/// The cores no other process is running on, at least 1: how many
/// threads a replay takes by default. On a machine whose cores are all
/// busy, more threads than one only add the cost of handing events between
/// them (measured: two threads took 18% longer than one with a busy loop on
/// each of 2 cores). Counted from the kernel's running processes, this one
/// among them, the least of three looks 1 ms apart.
pub fn idle_cores() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let running = (0..3)
        .filter_map(|look| {
            if look > 0 {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            running_processes()
        })
        .min();
    match running {
        Some(running) => cores.saturating_sub(running.saturating_sub(1)).max(1),
        None => cores,
    }
}

/// Processes running or ready to run now (`procs_running` in /proc/stat),
/// where the kernel tells it.
fn running_processes() -> Option<usize> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    stat.lines()
        .find_map(|line| line.strip_prefix("procs_running "))
        .and_then(|count| count.trim().parse().ok())
}

/// An event that moved `T` ahead by more than attribution window +
/// allowed lateness, with later events older than it by more than that:
/// their lists closed, or came late, because of it (docs/SPEC.md §3). A
/// clock gone wrong on one line looks like this; `serve` would have
/// rejected a time in the future as `time_in_future`, but a log has no wall
/// clock to check against.
#[derive(Clone, Debug, PartialEq)]
pub struct FarAhead {
    /// The log it is in (`-` for standard input).
    pub path: PathBuf,
    /// 1-based line number.
    pub line: u64,
    /// Its time.
    pub time: Nanos,
    /// How far it moved `T` ahead, in nanoseconds (more than `Nanos` holds
    /// between times at the ends of its range).
    pub by: u64,
    /// Later events older than `time` by more than window + lateness.
    pub behind: u64,
}

/// What a replay reports besides the figures.
pub struct Replayed {
    /// The figures.
    pub report: Report,
    /// The event that moved `T` ahead of the most later events, if one did.
    pub far_ahead: Option<FarAhead>,
}

/// Events that moved `T` ahead by more than window + lateness, the last
/// few, each with the later events left behind it: what [`FarAhead`] is
/// found among.
struct Jumps {
    /// Window + lateness.
    slack: Nanos,
    /// `T`, the latest event time read.
    latest: Option<Nanos>,
    /// The last [`JUMPS_KEPT`] jumps, oldest first.
    kept: Vec<Jump>,
    /// The log of the chunk being routed, and the line number before its first.
    chunk: (usize, u64),
}

/// One event that moved `T` far ahead.
struct Jump {
    time: Nanos,
    by: u64,
    /// Its log and line.
    at: (usize, u64),
    behind: u64,
}

/// Jumps looked after at once: a log with more gaps than this between a
/// wrong line and the events behind it names none.
const JUMPS_KEPT: usize = 8;

impl Jumps {
    fn new(slack: Nanos) -> Self {
        Self {
            slack,
            latest: None,
            kept: Vec::new(),
            chunk: (0, 0),
        }
    }

    /// Notes the accepted event of time `time` at `index` in its chunk.
    fn read(&mut self, index: usize, time: Nanos) {
        match self.latest {
            Some(latest) if time > latest => {
                let by = time.abs_diff(latest);
                if by > self.slack.unsigned_abs() {
                    if self.kept.len() == JUMPS_KEPT {
                        self.kept.remove(0);
                    }
                    self.kept.push(Jump {
                        time,
                        by,
                        at: (self.chunk.0, self.chunk.1 + index as u64 + 1),
                        behind: 0,
                    });
                }
                self.latest = Some(time);
            }
            Some(latest) if time < latest.saturating_sub(self.slack) => {
                let slack = self.slack;
                for jump in &mut self.kept {
                    if time < jump.time.saturating_sub(slack) {
                        jump.behind += 1;
                    }
                }
            }
            Some(_) => {}
            None => self.latest = Some(time),
        }
    }

    /// Numbers the lines of the chunk routed next, of log `path`, after
    /// line `before` of it.
    fn begin_chunk(&mut self, path: usize, before: u64) {
        self.chunk = (path, before);
    }

    /// The jump with the most events behind it, if any has one.
    fn far_ahead(&self, paths: &[PathBuf]) -> Option<FarAhead> {
        let jump = self
            .kept
            .iter()
            .filter(|jump| jump.behind > 0)
            .max_by_key(|jump| jump.behind)?;
        let (path, line) = jump.at;
        Some(FarAhead {
            path: paths[path].clone(),
            line,
            time: jump.time,
            by: jump.by,
            behind: jump.behind,
        })
    }
}

/// A line that was rejected, or that is not in the figures for another
/// reason: where it is and what befell it.
#[derive(Debug)]
pub struct NoticedLine<'a> {
    /// The log it is in (`-` for standard input).
    pub path: &'a Path,
    /// 1-based line number.
    pub line: u64,
    /// What befell it.
    pub what: LineNotice<'a>,
}

/// What befell a line that is in no figure.
#[derive(Debug)]
pub enum LineNotice<'a> {
    /// It was rejected, and why.
    Rejected(&'a Rejection),
    /// An impression that came late: its window had closed, by the latest
    /// event time before it, when it came. Counted under `late`.
    Late {
        /// The impression's time.
        time: Nanos,
        /// The latest event time before it.
        latest: Nanos,
    },
}

/// Replays `paths` in order as one stream and reports. `progress` is told
/// the bytes read from disk so far (compressed bytes for `.gz`), which
/// [`total_bytes`] totals; `on_noticed_line` hears of every line in no figure
/// (rejected, or an impression that came late), in file order. A log
/// that cannot be read to its end (missing, a truncated or corrupt `.gz`)
/// stops the replay there: the error carries the report of the lines before.
pub fn replay(
    paths: &[PathBuf],
    setup: ReplaySetup,
    options: ReplayOptions,
    progress: impl FnMut(u64),
    on_noticed_line: impl FnMut(NoticedLine<'_>),
) -> Result<Replayed, ReplayError> {
    let slack = setup
        .join
        .attribution_window
        .saturating_add(setup.join.allowed_lateness);
    let mut engine = ShardedEngine::new(setup.join, setup.evaluator, options.threads);
    let mut jumps = Jumps::new(slack);
    let read = read_logs(
        paths,
        &mut engine,
        (&setup.validator, &mut jumps),
        options,
        progress,
        on_noticed_line,
    );
    let engine = engine.finish();
    let report = Report::since_start(&engine, &setup.report);
    match read {
        Ok(()) => Ok(Replayed {
            report,
            far_ahead: jumps.far_ahead(paths),
        }),
        Err(unread) => Err(ReplayError {
            path: unread.path,
            line: unread.line,
            source: unread.source,
            report: Box::new(report),
        }),
    }
}

/// Applies the lines of `paths` to `engine` in order, up to the first read
/// failure, noting in `jumps` the events that moved `T` far ahead.
fn read_logs(
    paths: &[PathBuf],
    engine: &mut ShardedEngine,
    (validator, jumps): (&Validator, &mut Jumps),
    options: ReplayOptions,
    mut progress: impl FnMut(u64),
    mut on_noticed_line: impl FnMut(NoticedLine<'_>),
) -> Result<(), Unread> {
    // The chunk being evaluated, and the next, read while the shards work.
    let mut chunk = Chunk::new(options.max_line_bytes);
    let mut next = Chunk::new(options.max_line_bytes);
    let lines = options.chunk_lines.max(1);
    let mut batch = Batch::new();
    // The runs of parsed lines routed into the batch, and the room kept
    // from chunk to chunk for more.
    let mut routed: Vec<Vec<Parsed<'_>>> = Vec::new();
    let mut spare = Vec::new();
    let mut bytes_done = 0;
    for (path_index, path) in paths.iter().enumerate() {
        let mut line_number = 0u64;
        let fail = |line, source| Unread {
            path: path.clone(),
            line,
            source,
        };
        let file_bytes = std::rc::Rc::new(std::cell::Cell::new(0));
        let mut reader = open(path, file_bytes.clone()).map_err(|e| fail(0, e))?;
        // The whole lines before a failure are read: they are evaluated first.
        chunk.begin_log();
        let mut filled = chunk.fill(&mut reader, lines);
        while !chunk.is_empty() {
            let threads = options.threads.clamp(1, chunk.len().div_ceil(1024));
            let mut runs = crate::parallel::emptied(routed);
            let noticed = |line, what: LineNotice<'_>| {
                on_noticed_line(NoticedLine {
                    path,
                    line: line_number + line as u64 + 1,
                    what,
                })
            };
            let parsing = (validator, threads);
            jumps.begin_chunk(path_index, line_number);
            let routed_into = (&mut batch, &mut *jumps);
            parse_and_route(
                engine,
                routed_into,
                &chunk,
                parsing,
                &mut spare,
                &mut runs,
                noticed,
            );
            // Past a failure nothing more is read.
            let mut next_filled = Ok(());
            let read_next = || {
                if filled.is_ok() {
                    next.begin_after(&chunk);
                    next_filled = next.fill(&mut reader, lines);
                }
            };
            engine.apply_beside(&mut batch, &runs, read_next);
            spare.extend(runs.drain(..).map(crate::parallel::emptied));
            routed = crate::parallel::emptied(runs);
            line_number += chunk.len() as u64;
            progress(bytes_done + file_bytes.get());
            filled.map_err(|e| fail(line_number, e))?;
            std::mem::swap(&mut chunk, &mut next);
            filled = next_filled;
        }
        filled.map_err(|e| fail(line_number, e))?;
        bytes_done += file_bytes.get();
    }
    Ok(())
}

/// Parses `chunk` into `runs` with `validator` on `threads` threads, and
/// routes its events into `batch` in order as each run is parsed, noting
/// their times in `jumps`; the other threads meanwhile add the coverage
/// of the lists the batch before finalized. A batch that fills up stops the routing, which goes on once
/// it is applied. Tells `noticed` of each line in no figure, by its index
/// in the chunk.
fn parse_and_route<'c>(
    engine: &mut ShardedEngine,
    (batch, jumps): (&mut Batch, &mut Jumps),
    chunk: &'c Chunk,
    (validator, threads): (&Validator, usize),
    spare: &mut Vec<Vec<Parsed<'static>>>,
    runs: &mut Vec<Vec<Parsed<'c>>>,
    mut noticed: impl FnMut(usize, LineNotice<'_>),
) {
    let (mut router, coverage) = engine.routing();
    let mut stop = None;
    chunk.parse(validator, threads, spare, coverage, |run| {
        runs.push(run);
        if stop.is_none() {
            let from = (runs.len() - 1, 0);
            stop = route(&mut router, (batch, jumps), runs, from, &mut noticed);
        }
    });
    drop(router);
    while let Some(from) = stop {
        engine.apply(batch, runs);
        let (mut router, coverage) = engine.routing();
        coverage.into_iter().for_each(|job| job());
        stop = route(&mut router, (batch, jumps), runs, from, &mut noticed);
    }
}

/// Routes the lines of `runs` from `(run, line)` on into `batch` in
/// order, up to one that fills the batch: then what comes after it, for
/// routing once the batch is applied. Notes each event's time in
/// `jumps`, and tells `noticed` of each line in no figure, by their index
/// in the chunk.
fn route(
    router: &mut Router<'_>,
    (batch, jumps): (&mut Batch, &mut Jumps),
    runs: &[Vec<Parsed<'_>>],
    (first_run, first_line): (usize, usize),
    mut noticed: impl FnMut(usize, LineNotice<'_>),
) -> Option<(usize, usize)> {
    let mut run_start: usize = runs[..first_run].iter().map(Vec::len).sum();
    for (run, lines) in runs.iter().enumerate().skip(first_run) {
        let from = if run == first_run { first_line } else { 0 };
        for (line, parsed) in lines.iter().enumerate().skip(from) {
            match parsed {
                None => {}
                Some(Ok(event)) => {
                    let at = EventAt {
                        run: run as u32,
                        line: line as u32,
                    };
                    if let Some(latest) = router.route(batch, event, at) {
                        let time = event.time();
                        noticed(run_start + line, LineNotice::Late { time, latest });
                    }
                    jumps.read(run_start + line, event.time());
                    if batch.is_full() {
                        return Some((run, line + 1));
                    }
                }
                Some(Err(rejection)) => {
                    router.reject(rejection.reason);
                    noticed(run_start + line, LineNotice::Rejected(rejection));
                }
            }
        }
        run_start += lines.len();
    }
    None
}

/// Total size of the logs on disk, for a progress bar (0 for standard input).
pub fn total_bytes(paths: &[PathBuf]) -> u64 {
    paths
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum()
}

/// Opens `path` (`-`: standard input) for reading its lines.
fn open(path: &Path, read: std::rc::Rc<std::cell::Cell<u64>>) -> io::Result<Box<dyn Read>> {
    let raw: Box<dyn Read> = if path == Path::new("-") {
        Box::new(Unshrunk::stdin()?)
    } else {
        Box::new(Unshrunk::open(path)?)
    };
    let named_gzip = path.extension().is_some_and(|extension| extension == "gz");
    text(Counted { inner: raw, read }, named_gzip)
}

/// The text of a log read from `raw`: gunzipped when it starts with gzip's
/// header, past a byte order mark at its start; a log `named_gzip` (`.gz`)
/// must start with that header, since a damaged one would otherwise be
/// read as a line of text. No buffer stands in front of the log, so that
/// reads of a whole block go straight into the chunk.
fn text<'a>(mut raw: impl Read + 'a, named_gzip: bool) -> io::Result<Box<dyn Read + 'a>> {
    let head = read_ahead(&mut raw, GZIP_MAGIC.len())?;
    let gzip = head == GZIP_MAGIC;
    if named_gzip && !gzip {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "it is named .gz but does not start with gzip's header (1f 8b)",
        ));
    }
    let raw = io::Cursor::new(head).chain(raw);
    let mut decoded: Box<dyn Read + 'a> = if gzip {
        Box::new(gzip::Members::new(raw))
    } else {
        Box::new(raw)
    };
    // A UTF-8 byte order mark, which some editors write, is not part of the first line.
    let head = read_ahead(&mut decoded, UTF8_BOM.len())?;
    let kept = if head == UTF8_BOM { Vec::new() } else { head };
    Ok(Box::new(io::Cursor::new(kept).chain(decoded)))
}

/// The first `len` bytes of `reader`, fewer only at its end. A pipe or a
/// gzip member may hand out one byte at a time: the first read alone can
/// cut gzip's header or a byte order mark.
fn read_ahead(reader: &mut impl Read, len: usize) -> io::Result<Vec<u8>> {
    let mut head = Vec::with_capacity(len);
    reader.take(len as u64).read_to_end(&mut head)?;
    Ok(head)
}

/// The first bytes of a gzip stream.
const GZIP_MAGIC: &[u8] = &[0x1f, 0x8b];

/// The UTF-8 byte order mark.
const UTF8_BOM: &[u8] = b"\xef\xbb\xbf";

/// Bytes asked of the log at a time: 64 KiB, which stays in the cache until
/// its lines are parsed. With 1 MiB, the kernel's copy took a fifth of a
/// single-threaded replay.
const BLOCK: usize = 1 << 16;

/// Bytes of lines after which a chunk ends, however few lines it holds: a
/// chunk of 2,048 events is some 400 KB, but 2,048 lines just under
/// `max_line_bytes` were 2 GiB held at once. With it a chunk holds at most
/// this, one line and a block.
const CHUNK_BYTES: usize = 4 << 20;

/// A run of lines, read straight into one buffer.
#[derive(Default)]
struct Chunk {
    /// The chunk's lines, then the start of the lines after them; past
    /// `filled`, room for the next read.
    bytes: Vec<u8>,
    /// How much of `bytes` holds data from the log.
    filled: usize,
    /// Where each line ends in `bytes`: its newline, or the end of the data.
    ends: Vec<usize>,
    /// The longest line kept; a longer one is dropped as it is read and
    /// stands as an empty line listed in `too_long`.
    max_line: usize,
    /// The lines of the chunk that were longer than `max_line`.
    too_long: Vec<usize>,
    /// The bytes read are the rest of a line too long to keep: dropped up
    /// to its newline.
    skipping: bool,
}

impl Chunk {
    /// An empty chunk that keeps lines of at most `max_line` bytes.
    fn new(max_line: usize) -> Self {
        Self {
            max_line: max_line.max(1),
            ..Self::default()
        }
    }

    /// Reads up to `lines` lines, fewer when they hold [`CHUNK_BYTES`],
    /// into a chunk just begun. What is read past the last line taken
    /// starts the next chunk ([`Chunk::begin_after`]), so each byte of the
    /// log is copied once, by the kernel (a block at most is copied again).
    fn fill(&mut self, reader: &mut dyn Read, lines: usize) -> io::Result<()> {
        let mut scanned = 0;
        loop {
            while let Some(newline) = memchr::memchr(b'\n', &self.bytes[scanned..self.filled]) {
                self.end_line(scanned + newline);
                scanned += newline + 1;
                if self.ends.len() == lines || scanned >= CHUNK_BYTES {
                    return Ok(());
                }
            }
            scanned = self.filled;
            let line_start = self.start(self.ends.len());
            if self.skipping || self.filled - line_start > self.max_line {
                // Keep none of a line that is too long: drop what was read of it.
                self.skipping = true;
                self.filled = line_start;
                scanned = line_start;
            }
            if self.bytes.len() < self.filled + BLOCK {
                self.bytes.resize(self.filled + BLOCK, 0);
            }
            let read = match reader.read(&mut self.bytes[self.filled..self.filled + BLOCK]) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                read => read?,
            };
            if read == 0 {
                // The last line of a log need not end in a newline.
                if self.skipping || self.filled > self.start(self.ends.len()) {
                    self.end_line(self.filled);
                }
                return Ok(());
            }
            if self.skipping {
                let block = self.filled..self.filled + read;
                let Some(newline) = memchr::memchr(b'\n', &self.bytes[block.clone()]) else {
                    continue;
                };
                // The rest of the line is dropped; what follows its newline is kept.
                self.bytes
                    .copy_within(block.start + newline..block.end, self.filled);
                self.filled += read - newline;
                continue;
            }
            self.filled += read;
        }
    }

    /// Empties the chunk for the first lines of a log.
    fn begin_log(&mut self) {
        self.ends.clear();
        self.too_long.clear();
        self.filled = 0;
        self.skipping = false;
    }

    /// Empties the chunk and starts it with what `previous` read past its
    /// last line: the lines after those of `previous`.
    fn begin_after(&mut self, previous: &Chunk) {
        let rest =
            &previous.bytes[previous.start(previous.len()).min(previous.filled)..previous.filled];
        self.begin_log();
        if self.bytes.len() < rest.len() {
            self.bytes.resize(rest.len(), 0);
        }
        self.bytes[..rest.len()].copy_from_slice(rest);
        self.filled = rest.len();
    }

    /// Ends the current line at `end` (its newline, or the end of the log),
    /// noting it as too long when it was being skipped or is longer than
    /// `max_line` (one read whole within a block).
    fn end_line(&mut self, end: usize) {
        let whole_line_too_long = end - self.start(self.ends.len()).min(end) > self.max_line;
        if self.skipping || whole_line_too_long {
            self.skipping = false;
            self.too_long.push(self.ends.len());
        }
        self.ends.push(end);
    }

    fn len(&self) -> usize {
        self.ends.len()
    }

    fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Where line `index` starts: just past the previous line's newline.
    fn start(&self, index: usize) -> usize {
        index
            .checked_sub(1)
            .map_or(0, |previous| self.ends[previous] + 1)
    }

    /// Line `index`, without its newline or the carriage returns before it.
    fn line(&self, index: usize) -> &[u8] {
        let mut line = &self.bytes[self.start(index)..self.ends[index]];
        while let [rest @ .., b'\r'] = line {
            line = rest;
        }
        line
    }

    /// Parses line `index`; a blank line gives `None`.
    fn parse_line<'a>(&'a self, index: usize, validator: &crate::event::Validator) -> Parsed<'a> {
        if self.too_long.binary_search(&index).is_ok() {
            return Some(Err(Rejection::new(
                Reason::LineTooLong,
                format!(
                    "the line is longer than max_line_bytes = {} bytes; it was skipped (raise --max-line-bytes if such lines are events)",
                    self.max_line
                ),
            )));
        }
        let line = self.line(index);
        if line.iter().all(u8::is_ascii_whitespace) {
            return None;
        }
        Some(parse_line(line, validator))
    }

    /// Parses every line, in parallel over `threads` (one: on this thread),
    /// in runs of consecutive lines, and hands each run to `each` on this
    /// thread, in order, as soon as it is parsed: the other threads parse
    /// the next runs meanwhile, after doing the jobs `side`. The runs take
    /// their room from `spare` when it has some.
    fn parse<'c>(
        &'c self,
        validator: &crate::event::Validator,
        threads: usize,
        spare: &mut Vec<Vec<Parsed<'static>>>,
        side: Vec<impl FnOnce() + Send>,
        each: impl FnMut(Vec<Parsed<'c>>),
    ) {
        // More runs than threads, each parsed by the next thread free.
        let per_run = self.len().div_ceil(threads * RUNS_PER_THREAD).max(1);
        let runs: Vec<_> = (0..self.len())
            .step_by(per_run)
            .map(|start| (start, spare.pop().unwrap_or_default()))
            .collect();
        let parse_run = |(start, room): (usize, Vec<Parsed<'static>>)| {
            let end = (start + per_run).min(self.len());
            let mut run: Vec<Parsed<'c>> = crate::parallel::emptied(room);
            run.extend((start..end).map(|index| self.parse_line(index, validator)));
            run
        };
        crate::parallel::in_order(runs, threads, parse_run, each, side);
    }
}

/// Runs of lines a chunk is parsed in, per thread: enough for this thread
/// to route the runs others parsed between runs of its own.
const RUNS_PER_THREAD: usize = 8;

#[cfg(test)]
mod tests {
    use super::{Chunk, BLOCK, CHUNK_BYTES};
    use flate2::{write::GzEncoder, Compression};
    use std::io::{self, Read, Write};

    /// Hands out its data `block` bytes at a time at most.
    struct Trickle<'a> {
        data: &'a [u8],
        block: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = buf.len().min(self.block).min(self.data.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    /// Reads `reader` to its end as a replay does, two chunks taking turns,
    /// each begun with what the one before read past its lines; `each`
    /// sees every chunk with lines.
    fn read_in_turns(
        reader: &mut dyn Read,
        max_line: usize,
        lines: usize,
        mut each: impl FnMut(&Chunk),
    ) {
        let (mut chunk, mut next) = (Chunk::new(max_line), Chunk::new(max_line));
        chunk.begin_log();
        chunk.fill(reader, lines).expect("reading memory");
        while !chunk.is_empty() {
            each(&chunk);
            next.begin_after(&chunk);
            next.fill(reader, lines).expect("reading memory");
            std::mem::swap(&mut chunk, &mut next);
        }
    }

    /// Lines come out whole and in order whatever the reader's block size
    /// and the chunk's line count: across block edges, after carriage
    /// returns, blank, and with no newline at the end of the log.
    #[test]
    fn a_line_too_long_is_dropped_as_it_is_read_and_its_neighbours_kept() {
        let long = "x".repeat(50);
        let log = format!("ok\n{long}\nfine\n{long}");
        for block in [1, 3, 7, 64] {
            for lines in [1, 2, 100] {
                let mut reader = Trickle {
                    data: log.as_bytes(),
                    block,
                };
                let (mut read, mut too_long, mut seen) = (Vec::new(), Vec::new(), 0);
                read_in_turns(&mut reader, 10, lines, |chunk| {
                    assert!(
                        chunk.bytes.len() <= 10 + 2 * BLOCK,
                        "the long line is not held"
                    );
                    too_long.extend(chunk.too_long.iter().map(|i| seen + i));
                    read.extend((0..chunk.len()).map(|i| match chunk.too_long.contains(&i) {
                        true => Vec::new(),
                        false => chunk.line(i).to_vec(),
                    }));
                    seen += chunk.len();
                });
                let read: Vec<_> = read
                    .iter()
                    .map(|l| std::str::from_utf8(l).unwrap())
                    .collect();
                assert_eq!(read, ["ok", "", "fine", ""], "block {block}, lines {lines}");
                assert_eq!(too_long, [1, 3], "block {block}, lines {lines}");
            }
        }
    }

    /// gzip's header and a byte order mark are found however few bytes
    /// each read hands out, and only at the start of the log.
    #[test]
    fn the_text_of_a_log_is_found_however_it_trickles_in() {
        let gzip = |data: &[u8]| {
            let mut gzip = GzEncoder::new(Vec::new(), Compression::fast());
            gzip.write_all(data).expect("writing memory");
            gzip.finish().expect("writing memory")
        };
        let cases: [(&[u8], &[u8]); 7] = [
            (b"\xef\xbb\xbf{}\n", b"{}\n"),
            (b"{}\n\xef\xbb\xbf{}\n", b"{}\n\xef\xbb\xbf{}\n"),
            (b"\xef\xbb\xbf\xef\xbb\xbf", b"\xef\xbb\xbf"),
            (b"\xef\xbb", b"\xef\xbb"),
            (b"\x1f", b"\x1f"),
            (b"x", b"x"),
            (b"", b""),
        ];
        for (log, expected) in cases {
            for data in [log.to_vec(), gzip(log)] {
                let mut read = Vec::new();
                let trickle = Trickle {
                    data: &data,
                    block: 1,
                };
                super::text(trickle, false)
                    .and_then(|mut text| text.read_to_end(&mut read))
                    .expect("reading memory");
                assert_eq!(read, expected, "{log:?}");
            }
        }
    }

    /// Long lines end a chunk before its line count: it holds some
    /// megabytes, not `lines` times the longest line.
    #[test]
    fn a_chunk_of_long_lines_ends_at_its_byte_budget() {
        let line = format!("{}\n", "y".repeat(999));
        let log = line.repeat(10_000);
        let mut reader = Trickle {
            data: log.as_bytes(),
            block: BLOCK,
        };
        let mut read = 0;
        read_in_turns(&mut reader, 2_000, usize::MAX, |chunk| {
            assert!(chunk.bytes.len() <= CHUNK_BYTES + 2_000 + 2 * BLOCK);
            assert!(chunk.len() < 10_000, "the chunk ended at its budget");
            assert!((0..chunk.len()).all(|i| chunk.line(i).len() == 999));
            read += chunk.len();
        });
        assert_eq!(read, 10_000);
    }

    #[test]
    fn chunks_split_the_log_into_its_lines() {
        let log = "first line\r\n\nthird, a little longer than a block\r\r\n  \nlast";
        let expected = [
            "first line",
            "",
            "third, a little longer than a block",
            "  ",
            "last",
        ];
        for block in [1, 3, 7, 64] {
            for lines in [1, 2, 3, 5, 100] {
                let mut reader = Trickle {
                    data: log.as_bytes(),
                    block,
                };
                let mut read = Vec::new();
                read_in_turns(&mut reader, 64, lines, |chunk| {
                    assert!(chunk.len() <= lines);
                    read.extend((0..chunk.len()).map(|i| chunk.line(i).to_vec()));
                });
                let read: Vec<_> = read
                    .iter()
                    .map(|l| std::str::from_utf8(l).unwrap())
                    .collect();
                assert_eq!(read, expected, "block {block}, lines {lines}");
            }
        }
    }
}
