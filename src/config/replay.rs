//! Replay's own settings from flags, environment and the file: how it reads
//! a log, beyond the engine's settings it shares with `serve`.

use super::{at_least_one, defaults, help, pick, ConfigError, FileSettings};
use clap::Args;

/// How `replay` reads its logs.
#[derive(Args, Clone, Debug, Default)]
pub struct LogArgs {
    /// Limit: longest line of a log, in bytes.
    #[arg(long, env = "RANKWATCH_MAX_LINE_BYTES",
        help = help("Limit: longest line of a log in bytes, from 1 to 4294967296; a longer one is rejected (line_too_long) and skipped without being held in memory", defaults::MAX_LINE_BYTES))]
    pub max_line_bytes: Option<usize>,
}

impl LogArgs {
    /// `max_line_bytes`: the flag or its environment variable, else the
    /// file's key, else the default; refused out of its range.
    pub fn max_line_bytes(&self, file: &FileSettings) -> Result<usize, ConfigError> {
        let args = self;
        let max = pick!(args, file, max_line_bytes, defaults::MAX_LINE_BYTES);
        at_least_one("max_line_bytes", max)
    }
}
