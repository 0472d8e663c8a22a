//! Saving and restoring the engine's state across restarts (docs/SPEC.md §8).
//!
//! One file, `rankwatch.state`, in the state directory: a header (magic,
//! format version, payload length, xxh3 checksum) and the postcard-encoded
//! state with the fingerprint of the settings it was computed under, then
//! its [`JoinRules`] (which builds before them do not read). A save
//! writes a temporary file, syncs it and renames it over the old one, so a
//! crash leaves either the old state or the new one, never half of one; a
//! failed save removes its temporary file, and so does the check of the
//! directory at start for one a crash left.

use crate::join::{CountedBefore, EncodedState, EngineState, LaterCounters};
use postcard::Deserializer;
use serde::{Deserialize, Serialize};
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"RNKWATCH";
/// Version 2 adds the sums of squares of per-list values (docs/SPEC.md §9);
/// version 3, the segment values of each group and their registries;
/// version 4, each group's coverage and exposure (docs/SPEC.md §11); version 5,
/// coverage panes that cascade (a longer window's panes leave out the
/// lists of the shorter windows' newest panes); version 6, open
/// impressions in fixed-width fields; version 9, coverage since start
/// that takes every list as it comes rather than the panes the windows
/// pass on. Files of version 8 are read, their newest panes added to the
/// coverage since start; files of another version are set aside.
const FORMAT_VERSION: u32 = 9;
/// The version before [`FORMAT_VERSION`], which is read too.
const COVERAGE_PASSED_ON: u32 = 8;
const HEADER_LEN: usize = 8 + 4 + 8 + 8;
const FILE_NAME: &str = "rankwatch.state";
/// The file a server holds locked while the directory is its, holding its pid.
const LOCK_NAME: &str = "rankwatch.lock";
/// The file the last save of a graceful shutdown leaves beside the state:
/// a copy of the state file's header.
const CLEAN_MARK_NAME: &str = "rankwatch.clean";

/// A state file's header (magic, format version, the payload's length and
/// checksum) for the payload made of `parts`, in order.
fn header_of<'a>(parts: impl Iterator<Item = &'a [u8]> + Clone) -> Vec<u8> {
    let mut checksum = xxhash_rust::xxh3::Xxh3::new();
    let mut length = 0u64;
    for part in parts {
        checksum.update(part);
        length += part.len() as u64;
    }
    let mut header = Vec::with_capacity(HEADER_LEN);
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    header.extend_from_slice(&length.to_le_bytes());
    header.extend_from_slice(&checksum.digest().to_le_bytes());
    header
}

/// A state file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// Reading or writing failed.
    #[error("state file {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The file is damaged (wrong magic, short, bad checksum, undecodable).
    #[error("state file {path} is corrupt: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The state directory's lock file was removed while this server ran,
    /// and another server holds the directory now.
    #[error("lost the state directory: its lock file {path} was removed while this server ran, and it cannot be taken again: {reason}; not saving, which would overwrite the other server's figures")]
    LockLost {
        /// The lock file.
        path: PathBuf,
        /// Why it cannot be taken again.
        reason: String,
    },
    /// The file was written by another format version or under other metric settings.
    #[error("state file {path} is incompatible: {reason}")]
    Incompatible {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

/// The settings of two fingerprints that differ, as `key was A, is B`
/// (a fingerprint is `k=… metrics=… windows=…`, each key once, in order).
pub fn settings_changed(saved: &str, running: &str) -> String {
    let fields = |fingerprint: &str| -> Vec<(String, String)> {
        let mut fields: Vec<(String, String)> = Vec::new();
        for word in fingerprint.split(' ') {
            match word.split_once('=') {
                Some((key, value))
                    if !key.is_empty() && key.chars().all(|c| c.is_ascii_lowercase()) =>
                {
                    fields.push((key.to_owned(), value.to_owned()))
                }
                _ => match fields.last_mut() {
                    Some((_, value)) => *value = format!("{value} {word}"),
                    None => fields.push((String::new(), word.to_owned())),
                },
            }
        }
        fields
    };
    let (saved, running) = (fields(saved), fields(running));
    let value = |fields: &[(String, String)], key: &str| {
        fields
            .iter()
            .find(|(k, _)| k == key)
            .map_or_else(|| "unset".to_owned(), |(_, v)| v.clone())
    };
    let mut keys: Vec<&str> = Vec::new();
    for (key, _) in saved.iter().chain(&running) {
        if !keys.contains(&key.as_str()) {
            keys.push(key);
        }
    }
    keys.iter()
        .flat_map(|key| {
            let (was, is) = (value(&saved, key), value(&running, key));
            if was == is {
                return Vec::new();
            }
            match (struct_fields(&was), struct_fields(&is)) {
                (Some(was), Some(is)) if was.len() == is.len() => was
                    .into_iter()
                    .zip(is)
                    .filter(|(was, is)| was != is)
                    .map(|((field, was), (_, is))| {
                        changed(setting_name(field), was.to_lowercase(), is.to_lowercase())
                    })
                    .collect(),
                _ => vec![changed(key, &was, &is)],
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// One setting that changed, as the messages of this module say it.
fn changed(name: &str, was: impl std::fmt::Display, is: impl std::fmt::Display) -> String {
    format!("{name} was {was}, is {is}")
}

/// The fields of a value printed as `Name { field: value, … }` (the
/// metric settings in a fingerprint), in order; a field's value may
/// itself be such a value.
fn struct_fields(value: &str) -> Option<Vec<(&str, &str)>> {
    let (_, body) = value.split_once(" { ")?;
    let body = body.strip_suffix(" }")?;
    let mut fields = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (at, c) in body.char_indices().chain([(body.len(), ',')]) {
        match c {
            '{' | '[' | '(' => depth += 1,
            '}' | ']' | ')' => depth -= 1,
            ',' if depth == 0 => {
                fields.push(body[start..at].trim().split_once(": ")?);
                start = at + 1;
            }
            _ => {}
        }
    }
    Some(fields)
}

/// The setting a field of the metric settings is set by.
fn setting_name(field: &str) -> &str {
    match field {
        "err_max_grade" => "g_max",
        "rbp_persistence" => "rbp_p",
        field => field,
    }
}

/// The settings that decide what each list counts without changing what
/// a state holds, so not part of its fingerprint: saved beside a state and
/// compared at restore, where a change is warned of, not refused (the
/// figures since start then mix lists joined under both).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct JoinRules {
    /// How long after an impression its interactions count.
    pub attribution_window: std::time::Duration,
    /// How far the watermark trails the latest event time.
    pub allowed_lateness: std::time::Duration,
    /// The grade of each interaction type, sorted by type.
    pub grades: Vec<(String, f64)>,
}

impl JoinRules {
    /// What differs between `saved` and these rules, as `name was A, is B;
    /// …` (grades compared as numbers); `None` when nothing does.
    pub fn changed_since(&self, saved: &JoinRules) -> Option<String> {
        let duration = |d: std::time::Duration| humantime::format_duration(d).to_string();
        let mut changes = Vec::new();
        for (name, was, is) in [
            (
                "attribution_window",
                saved.attribution_window,
                self.attribution_window,
            ),
            (
                "allowed_lateness",
                saved.allowed_lateness,
                self.allowed_lateness,
            ),
        ] {
            if was != is {
                changes.push(changed(name, duration(was), duration(is)));
            }
        }
        let grade = |rules: &JoinRules, kind: &str| {
            let grade = rules.grades.iter().find(|(known, _)| known == kind);
            grade.map(|&(_, grade)| grade)
        };
        let shown =
            |grade: Option<f64>| grade.map_or_else(|| "unset".to_owned(), |g| g.to_string());
        let mut kinds: Vec<&str> = saved
            .grades
            .iter()
            .chain(&self.grades)
            .map(|(k, _)| k.as_str())
            .collect();
        kinds.sort_unstable();
        kinds.dedup();
        for kind in kinds {
            let (was, is) = (grade(saved, kind), grade(self, kind));
            if was != is {
                changes.push(changed(&format!("grade of {kind}"), shown(was), shown(is)));
            }
        }
        (!changes.is_empty()).then(|| changes.join("; "))
    }
}

/// A state read back.
pub struct Loaded {
    /// The state.
    pub state: EngineState,
    /// What differs between the join rules it was computed under and the
    /// running ones ([`JoinRules::changed_since`]); `None` when nothing
    /// does, or they were not saved.
    pub join_rules_changed: Option<String>,
}

/// A state directory the server cannot save to, found at start.
#[derive(Debug, thiserror::Error)]
#[error("state_dir {} {problem}", dir.display())]
pub struct UnusableDir {
    dir: PathBuf,
    problem: String,
}

impl UnusableDir {
    /// `dir` cannot be used, for the reason `problem` gives.
    fn new(dir: &Path, problem: String) -> Self {
        Self {
            dir: dir.to_owned(),
            problem,
        }
    }
}

/// Checks that `dir` is a directory, creating it if missing.
fn ensure_dir(dir: &Path) -> Result<(), UnusableDir> {
    let unusable = |problem| UnusableDir::new(dir, problem);
    match fs::metadata(dir) {
        Ok(metadata) if !metadata.is_dir() => Err(unusable(
            "is a file, not a directory: point state_dir at a directory (it is created if missing), or move the file away".to_owned(),
        )),
        Ok(_) => Ok(()),
        Err(_) => fs::create_dir_all(dir).map_err(|error| {
            unusable(format!("cannot be created ({error}): create it, or point state_dir at a writable directory"))
        }),
    }
}

/// Takes `dir` (created if missing) for this process alone by locking its
/// lock file, which is left holding this process's pid.
fn take_lock(dir: &Path) -> Result<File, UnusableDir> {
    let unusable = |problem| UnusableDir::new(dir, problem);
    ensure_dir(dir)?;
    let path = dir.join(LOCK_NAME);
    // Not through a link, which would lock and write a file elsewhere, nor
    // waiting on a named pipe.
    let mut file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&path)
        .map_err(|error| unusable(format!("cannot hold its lock file ({error}): fix its permissions, or point state_dir at a writable directory")))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => {
            let holder = fs::read_to_string(&path).unwrap_or_default();
            let holder = holder.trim();
            let holder = if holder.is_empty() {
                String::new()
            } else {
                format!(" (pid {holder})")
            };
            return Err(unusable(format!(
                "is in use by another rankwatch server{holder}: two servers saving to one state directory overwrite each other's figures; give each its own state_dir, or stop the other first (a Deployment whose state_dir is a persistent volume: use strategy Recreate)"
            )));
        }
        Err(fs::TryLockError::Error(error)) => {
            return Err(unusable(format!(
                "cannot be locked ({error}): point state_dir at a local directory"
            )))
        }
    }
    // The pid is for the message above; the lock alone decides.
    let _ = file
        .set_len(0)
        .and_then(|()| write!(file, "{}", std::process::id()));
    Ok(file)
}

/// Whether `path` names the open file `file` (the same device and inode).
fn is_same_file(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), fs::metadata(path)) {
        (Ok(open), Ok(named)) => open.dev() == named.dev() && open.ino() == named.ino(),
        _ => false,
    }
}

/// The state file of one state directory.
#[derive(Clone, Debug)]
pub struct StateFile {
    path: PathBuf,
    fingerprint: String,
    /// The running join rules.
    join_rules: JoinRules,
    /// The directory's lock, once [`Self::lock`] took it: released as the
    /// last clone is dropped (or the process ends); taken again by a save
    /// that finds its file gone ([`Self::hold_lock`]).
    lock: Option<std::sync::Arc<std::sync::Mutex<File>>>,
}

impl StateFile {
    /// The state file in `dir` for engines whose metric settings print as `fingerprint`.
    pub fn new(dir: &Path, fingerprint: String) -> Self {
        Self {
            path: dir.join(FILE_NAME),
            fingerprint,
            join_rules: JoinRules::default(),
            lock: None,
        }
    }

    /// Saves `join_rules` beside the state, and compares a restored
    /// state's with them.
    pub fn with_join_rules(self, join_rules: JoinRules) -> Self {
        Self { join_rules, ..self }
    }

    /// Takes the directory for this process alone, for as long as this
    /// file lives: two servers saving to one directory would each overwrite
    /// the other's figures. Creates the directory if missing; call before
    /// [`Self::prepare`], which may remove a temporary file.
    pub fn lock(mut self) -> Result<Self, UnusableDir> {
        let file = take_lock(self.dir())?;
        self.lock = Some(std::sync::Arc::new(std::sync::Mutex::new(file)));
        Ok(self)
    }

    /// Checks, before a save, that the directory is still this server's:
    /// that its lock file is the one this server locked. A lock file
    /// removed (the directory deleted by a cleanup, say) would let another
    /// server take the directory and the two overwrite each other's
    /// figures: the lock is taken again, with a warning, or, when another
    /// server holds it by now, the save fails saying so.
    fn hold_lock(&self) -> Result<(), StateError> {
        let Some(lock) = &self.lock else {
            return Ok(());
        };
        let mut held = lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let path = self.dir().join(LOCK_NAME);
        if is_same_file(&held, &path) {
            return Ok(());
        }
        let file = take_lock(self.dir()).map_err(|unusable| StateError::LockLost {
            path: path.clone(),
            reason: unusable.to_string(),
        })?;
        tracing::warn!(
            path = %path.display(),
            "the state directory's lock file was removed or replaced while this server ran; took the directory again"
        );
        *held = file;
        Ok(())
    }

    /// Where the state lives.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The state directory.
    fn dir(&self) -> &Path {
        self.path.parent().unwrap_or(Path::new("."))
    }

    /// The file a save writes before renaming it over [`Self::path`].
    fn temporary(&self) -> PathBuf {
        self.path.with_extension("state.tmp")
    }

    /// Checks at start that the state directory is usable: a directory
    /// (created if missing) where a file can be written. Removes the
    /// temporary file a save cut short left behind; returns its path if
    /// there was one.
    pub fn prepare(&self) -> Result<Option<PathBuf>, UnusableDir> {
        let dir = self.dir();
        let unusable = |problem| UnusableDir::new(dir, problem);
        ensure_dir(dir)?;
        let temporary = self.temporary();
        let stale = fs::symlink_metadata(&temporary).is_ok();
        create_new(&temporary)
            .and_then(|mut file| file.write_all(MAGIC))
            .and_then(|()| fs::remove_file(&temporary))
            .map_err(|error| {
                // An empty directory there is removed; one that is not stays.
                unusable(match fs::symlink_metadata(&temporary) {
                    Ok(left) if left.is_dir() => format!(
                        "holds a directory that is not empty at {}, where a save writes its temporary file: move it away",
                        temporary.display()
                    ),
                    _ => format!("is not writable ({error}): fix its permissions or free space, or point state_dir at a writable directory"),
                })
            })?;
        Ok(stale.then_some(temporary))
    }

    /// Writes `state` atomically; returns the bytes written. The payload
    /// goes out as the parts it is made of: a save holds no copy of it.
    pub fn save(&self, state: &EncodedState) -> Result<u64, StateError> {
        let io_error = |source| self.io_error(source);
        let encoded = |e: postcard::Error| io_error(io::Error::other(e.to_string()));
        // The join rules, what /metrics' counters leave out and the later
        // counters last: a build before them reads the rest as it did.
        let fingerprint = postcard::to_stdvec(&self.fingerprint).map_err(encoded)?;
        let trailer = postcard::to_stdvec(&(
            &self.join_rules,
            &state.counted_before,
            &state.later_counters,
        ))
        .map_err(encoded)?;
        let parts = std::iter::once(&fingerprint[..])
            .chain(state.pieces.iter())
            .chain(std::iter::once(&trailer[..]));
        let header = header_of(parts.clone());
        if self.lock.is_some() {
            self.hold_lock()?;
        } else if let Some(dir) = self.path.parent() {
            fs::create_dir_all(dir).map_err(io_error)?;
        }
        let temporary = self.temporary();
        let mut bytes = 0;
        let written = create_new(&temporary)
            .and_then(|mut file| {
                for part in std::iter::once(&header[..]).chain(parts) {
                    file.write_all(part)?;
                    bytes += part.len() as u64;
                }
                file.sync_all()
            })
            .and_then(|()| fs::rename(&temporary, &self.path));
        if let Err(error) = written {
            // A full disk must not also be left holding half a state.
            let _ = fs::remove_file(&temporary);
            return Err(io_error(error));
        }
        self.sync_dir().map_err(io_error)?;
        Ok(bytes)
    }

    /// Makes the directory's entries, as renamed or removed, last.
    fn sync_dir(&self) -> io::Result<()> {
        File::open(self.dir())?.sync_all()
    }

    /// The state file's header, as it is on disk now; an error when it is
    /// not a regular file, which is not opened (a named pipe would wait
    /// for a writer).
    fn header(&self) -> io::Result<Vec<u8>> {
        read_head(&self.path, HEADER_LEN, |path| fs::metadata(path))
    }

    /// Where the mark of a graceful shutdown is.
    fn clean_mark(&self) -> PathBuf {
        self.dir().join(CLEAN_MARK_NAME)
    }

    /// Notes that the state file was saved by a graceful shutdown: the
    /// next server to start from it carries the exported counters on
    /// rather than resetting them. The mark is a new file, whatever was
    /// at its path before (a link is replaced, not written through).
    pub fn mark_clean(&self) -> io::Result<()> {
        let header = self.header()?;
        let mut mark = create_new(&self.clean_mark())?;
        mark.write_all(&header)?;
        mark.sync_all()?;
        self.sync_dir()
    }

    /// Whether the state file is the one a graceful shutdown saved last
    /// (its header is the mark's), with no server started from it since.
    /// Removes the mark, whatever it is, so that this server's own end,
    /// if not graceful, reads as such; false when it could not be removed.
    /// Neither file is opened unless it is a regular file.
    pub fn take_clean_mark(&self) -> bool {
        let path = self.clean_mark();
        let Ok(mark) = read_head(&path, HEADER_LEN + 1, |path| fs::symlink_metadata(path)) else {
            let _ = remove_entry(&path);
            return false;
        };
        let matches = self.header().is_ok_and(|header| header == mark);
        let removed = remove_entry(&path).and_then(|()| self.sync_dir());
        if let Err(error) = &removed {
            tracing::warn!(%error, path = %path.display(), "could not remove the mark of a graceful shutdown: /metrics' counters start again from 0, as after a crash");
        }
        matches && removed.is_ok()
    }

    /// This file is damaged, as `reason` says.
    fn corrupt(&self, reason: &str) -> StateError {
        StateError::Corrupt {
            path: self.path.clone(),
            reason: reason.to_owned(),
        }
    }

    /// Reading or writing this file failed.
    fn io_error(&self, source: io::Error) -> StateError {
        StateError::Io {
            path: self.path.clone(),
            source,
        }
    }

    /// Reads the saved state; `None` when there is none.
    pub fn load(&self) -> Result<Option<Loaded>, StateError> {
        let corrupt = |reason: &str| self.corrupt(reason);
        let io_error = |source| self.io_error(source);
        // A named pipe would wait for a writer, a device such as /dev/zero
        // never end: neither is opened.
        let length = match fs::metadata(&self.path) {
            Ok(metadata) if metadata.is_file() => metadata.len(),
            Ok(_) => return Err(corrupt("not a regular file")),
            // A link whose file is gone (a volume not mounted, say) is not
            // "no state": it is set aside, counted and logged.
            Err(e)
                if e.kind() == io::ErrorKind::NotFound
                    && fs::symlink_metadata(&self.path).is_ok() =>
            {
                return Err(corrupt(
                    "a link to nothing (its file is gone or not mounted)",
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(io_error(source)),
        };
        // The header first: a file that does not fit it is not read on, and
        // a payload that does not match its checksum is not decoded.
        let (version, file) = self.read_checked(length)?;
        let undecodable = |e: postcard::Error| corrupt(&format!("undecodable: {e}"));
        let mut decoder = Deserializer::from_flavor(Streamed::new(file.payload()?));
        let (fingerprint, mut state) =
            <(String, EngineState)>::deserialize(&mut decoder).map_err(undecodable)?;
        let mut rest = Vec::new();
        let mut payload = decoder.finalize().map_err(undecodable)?;
        payload.read_to_end(&mut rest).map_err(io_error)?;
        // Read twice, checked twice: a payload written to between the two
        // readings is not used.
        file.check(payload.into_inner())?;
        let rest = &rest[..];
        // None from a build before join rules were saved; rules this build
        // cannot read leave the state as usable as before they were saved.
        let (join_rules, rest) = match postcard::take_from_bytes::<JoinRules>(rest) {
            Ok((rules, rest)) => (Some(rules), rest),
            Err(_) => (None, &[][..]),
        };
        // Empty from a build before it was saved: the counters are reset.
        let (counted_before, rest) =
            postcard::take_from_bytes::<CountedBefore>(rest).unwrap_or_default();
        state.counted_before = counted_before;
        // Empty from a build before them: they start at 0.
        state.restore_later_counters(LaterCounters::from_bytes(rest));
        state.coverage_passed_on = version == COVERAGE_PASSED_ON;
        if fingerprint != self.fingerprint {
            return Err(StateError::Incompatible {
                path: self.path.clone(),
                reason: format!(
                    "saved under other settings ({}); to keep its figures, restart with the settings it was saved under and put the file back as {FILE_NAME}",
                    settings_changed(&fingerprint, &self.fingerprint)
                ),
            });
        }
        if let Some(inconsistency) = state.inconsistency() {
            return Err(corrupt(&format!("inconsistent: {inconsistency}")));
        }
        let join_rules_changed = join_rules.and_then(|saved| self.join_rules.changed_since(&saved));
        Ok(Some(Loaded {
            state,
            join_rules_changed,
        }))
    }

    /// The format version of the state file, `length` bytes long, and the
    /// file to read its payload from: its header is read and checked first
    /// (magic, a version this build reads, the payload's length against the
    /// file's), then its payload against its checksum, as it passes, so
    /// that no copy of a payload of hundreds of megabytes is held.
    fn read_checked(&self, length: u64) -> Result<(u32, Payload<'_>), StateError> {
        let corrupt = |reason: &str| self.corrupt(reason);
        let io_error = |source| self.io_error(source);
        let mut file = File::open(&self.path).map_err(io_error)?;
        let mut header = Vec::with_capacity(HEADER_LEN);
        (&mut file)
            .take(HEADER_LEN as u64)
            .read_to_end(&mut header)
            .map_err(io_error)?;
        if header.len() < HEADER_LEN || &header[..8] != MAGIC {
            return Err(corrupt("not a rankwatch state file"));
        }
        let word = |range: std::ops::Range<usize>| {
            header[range]
                .iter()
                .rev()
                .fold(0u64, |acc, b| acc << 8 | u64::from(*b))
        };
        let version = word(8..12) as u32;
        if version != FORMAT_VERSION && version != COVERAGE_PASSED_ON {
            return Err(StateError::Incompatible {
                path: self.path.clone(),
                reason: format!(
                    "format version {version}, this build reads version {FORMAT_VERSION}"
                ),
            });
        }
        let payload = Payload {
            state: self,
            file,
            len: word(12..20),
            checksum: word(20..28),
        };
        if Some(length) != payload.len.checked_add(HEADER_LEN as u64) {
            return Err(corrupt(SHORT));
        }
        let mut read = payload.payload()?;
        io::copy(&mut read, &mut io::sink()).map_err(io_error)?;
        payload.check(read.into_inner())?;
        Ok((version, payload))
    }

    /// Moves an unusable file aside (keeping it for a person to inspect)
    /// under a name no file has, so that one set aside before in the same
    /// second is kept too (a restart loop had replaced a state's only copy
    /// with the empty state saved after it); returns its new path.
    pub fn set_aside(&self) -> Result<PathBuf, StateError> {
        let seconds = crate::clock::wall_clock() / crate::event::NANOS_PER_SECOND;
        let named = |n: u32| {
            let extension = match n {
                0 => format!("state.rejected-{seconds}"),
                n => format!("state.rejected-{seconds}-{n}"),
            };
            self.path.with_extension(extension)
        };
        // The state directory is locked: no other process names files in it.
        let aside = (0..u32::MAX)
            .map(named)
            .find(|name| fs::symlink_metadata(name).is_err())
            .unwrap_or_else(|| named(u32::MAX));
        fs::rename(&self.path, &aside).map_err(|source| StateError::Io {
            path: self.path.clone(),
            source,
        })?;
        Ok(aside)
    }
}

/// The first `len` bytes of the file at `path`, which `metadata` (which
/// follows links or not) must find regular: anything else is not opened.
fn read_head(
    path: &Path,
    len: usize,
    metadata: fn(&Path) -> io::Result<fs::Metadata>,
) -> io::Result<Vec<u8>> {
    if !metadata(path)?.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    // Not waiting for a writer either, should a pipe take its place since.
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let mut head = Vec::with_capacity(len);
    file.take(len as u64).read_to_end(&mut head)?;
    Ok(head)
}

/// A new file at `path`, for writing, in place of whatever was there
/// (removed, not opened: a named pipe would wait for a reader, a link
/// would lead the writes out of the state directory).
fn create_new(path: &Path) -> io::Result<File> {
    remove_entry(path)?;
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
}

/// Removes what is at `path`, a directory if empty; nothing there is no error.
fn remove_entry(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(error),
        Ok(metadata) if metadata.is_dir() => fs::remove_dir(path),
        Ok(_) => fs::remove_file(path),
    }
}

/// What a payload that is not as long as its header says is.
const SHORT: &str = "not as long as its header says (truncated, or written to since)";

/// The payload of a state file whose header was read: where it starts in
/// `file`, and the length and checksum its header gives.
struct Payload<'a> {
    state: &'a StateFile,
    file: File,
    len: u64,
    checksum: u64,
}

impl Payload<'_> {
    /// A reading of its bytes from their start, checksummed as they are
    /// read, and one more if the file grew since its length was taken (a
    /// file written to since is then found to differ from its header).
    fn payload(&self) -> Result<io::BufReader<Checksummed<io::Take<&File>>>, StateError> {
        use std::io::Seek;
        (&self.file)
            .seek(io::SeekFrom::Start(HEADER_LEN as u64))
            .map_err(|source| self.state.io_error(source))?;
        let reader = (&self.file).take(self.len.saturating_add(1));
        Ok(io::BufReader::with_capacity(
            READ_BYTES,
            Checksummed::new(reader),
        ))
    }

    /// Whether `read`, having read to the payload's end, read the payload
    /// its header gives.
    fn check<R>(&self, read: Checksummed<R>) -> Result<(), StateError> {
        if read.bytes != self.len {
            return Err(self.state.corrupt(SHORT));
        }
        if read.checksum.digest() != self.checksum {
            return Err(self.state.corrupt("checksum mismatch"));
        }
        Ok(())
    }
}

/// Bytes read from the state file at once.
const READ_BYTES: usize = 1 << 20;

/// A reader that takes the checksum of what it reads, and counts it.
struct Checksummed<R> {
    inner: R,
    checksum: xxhash_rust::xxh3::Xxh3,
    bytes: u64,
}

impl<R> Checksummed<R> {
    fn new(inner: R) -> Self {
        Self {
            inner,
            checksum: xxhash_rust::xxh3::Xxh3::new(),
            bytes: 0,
        }
    }
}

impl<R: Read> Read for Checksummed<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let read = self.inner.read(buf)?;
        self.checksum.update(&buf[..read]);
        self.bytes += read as u64;
        Ok(read)
    }
}

/// A postcard source that decodes a state as it reads it, holding one
/// value's bytes at a time (an open list's, a string's), not the whole.
struct Streamed<R> {
    reader: R,
    value: Vec<u8>,
}

impl<R> Streamed<R> {
    fn new(reader: R) -> Self {
        Self {
            reader,
            value: Vec::new(),
        }
    }
}

impl<'de, R: Read + 'de> postcard::de_flavors::Flavor<'de> for Streamed<R> {
    type Remainder = R;
    type Source = R;

    fn pop(&mut self) -> postcard::Result<u8> {
        let mut byte = [0];
        self.reader
            .read_exact(&mut byte)
            .map_err(|_| postcard::Error::DeserializeUnexpectedEnd)?;
        Ok(byte[0])
    }

    /// Nothing a state holds borrows from the bytes it was read from.
    fn try_take_n(&mut self, _: usize) -> postcard::Result<&'de [u8]> {
        Err(postcard::Error::DeserializeUnexpectedEnd)
    }

    fn try_take_n_temp<'a>(&'a mut self, n: usize) -> postcard::Result<&'a [u8]>
    where
        'de: 'a,
    {
        // Grown as bytes come, so a length read from a damaged file asks
        // for no more memory than the file holds.
        self.value.clear();
        let read = (&mut self.reader)
            .take(n as u64)
            .read_to_end(&mut self.value)
            .map_err(|_| postcard::Error::DeserializeUnexpectedEnd)?;
        if read != n {
            return Err(postcard::Error::DeserializeUnexpectedEnd);
        }
        Ok(&self.value)
    }

    fn finalize(self) -> postcard::Result<R> {
        Ok(self.reader)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{EngineArgs, FileSettings};
    use crate::engine::EngineSettings;
    use crate::event::json::parse_line;
    use crate::join::{Engine, LaterCounters};

    /// A state file's bytes with `payload` whole.
    fn framed(payload: &[u8]) -> Vec<u8> {
        [header_of(std::iter::once(payload)), payload.to_vec()].concat()
    }

    fn engine_with_traffic() -> (Engine, EngineSettings) {
        let settings =
            EngineSettings::resolve(&EngineArgs::default(), &FileSettings::default()).unwrap();
        let mut engine = Engine::new(
            settings.join(&[std::time::Duration::from_secs(60)]),
            settings.evaluator(),
        );
        let validator = settings.validator(None);
        for line in [
            r#"{"impression":{"requestId":"r1","userId":"u1","itemIds":["a","b"],"time":"2026-11-01T10:00:00Z"}}"#,
            r#"{"interaction":{"userId":"u1","itemId":"b","type":"click","time":"2026-11-01T10:00:01Z"}}"#,
            r#"{"interaction":{"userId":"u2","itemId":"b","requestId":"r9","type":"click","time":"2026-11-01T10:00:02Z"}}"#,
        ] {
            engine.apply(parse_line(line, &validator).unwrap());
        }
        (engine, settings)
    }

    #[test]
    fn restores_what_it_saved() {
        let dir = tempfile::tempdir().unwrap();
        let (mut engine, settings) = engine_with_traffic();
        let file = StateFile::new(dir.path(), "fingerprint".into());
        file.save(&engine.encode_state(Default::default()).unwrap())
            .unwrap();
        let state = file.load().unwrap().unwrap().state;
        let mut restored = Engine::from_state(
            settings.join(&[std::time::Duration::from_secs(60)]),
            settings.evaluator(),
            state,
        );
        assert_eq!(
            (restored.open_impressions(), restored.waiting_interactions()),
            (1, 1)
        );
        engine.finish();
        restored.finish();
        assert_eq!(restored.counters(), engine.counters());
        assert_eq!(
            restored.aggregates()[0].totals,
            engine.aggregates()[0].totals
        );
    }

    #[test]
    fn what_the_counters_left_out_is_restored_and_a_mark_of_a_graceful_shutdown_is_taken_once() {
        let dir = tempfile::tempdir().unwrap();
        let (mut engine, settings) = engine_with_traffic();
        engine.finish();
        engine.reset_exported_counters();
        let counted_before = engine.counted_before();
        assert_eq!(counted_before.groups.len(), 1);
        let file = StateFile::new(dir.path(), "fingerprint".into());
        file.save(&engine.encode_state(Default::default()).unwrap())
            .unwrap();
        assert!(
            !file.take_clean_mark(),
            "no mark before a graceful shutdown"
        );
        file.mark_clean().unwrap();
        assert!(file.take_clean_mark());
        assert!(!file.take_clean_mark(), "taken by the first start");
        file.mark_clean().unwrap();
        let mut changed = engine.encode_state(Default::default()).unwrap();
        changed.counted_before = Default::default();
        file.save(&changed).unwrap();
        assert!(
            !file.take_clean_mark(),
            "another state saved since the mark"
        );
        file.save(&engine.encode_state(Default::default()).unwrap())
            .unwrap();

        let state = file.load().unwrap().unwrap().state;
        assert_eq!(state.counted_before, counted_before);
        let restore = |state| {
            let windows = [std::time::Duration::from_secs(60)];
            Engine::from_state(settings.join(&windows), settings.evaluator(), state)
        };
        let mut restored = restore(file.load().unwrap().unwrap().state);
        assert!(restored.carry_on_from(counted_before.clone()));
        assert_eq!(restored.counted_before(), counted_before);
        let mut restored = restore(state);
        let mut more = counted_before.clone();
        more.groups[0].as_mut().unwrap().totals.lists += 1;
        assert!(
            !restored.carry_on_from(more),
            "more lists than the group holds"
        );
        let mut more = counted_before.clone();
        more.groups[0].as_mut().unwrap().totals.sums[0] += 1.0;
        assert!(!restored.carry_on_from(more), "a sum above the group's");
        let mut more = counted_before.clone();
        more.groups[0].as_mut().unwrap().totals.squares[0] = f64::NEG_INFINITY;
        assert!(!restored.carry_on_from(more), "a sum of squares below 0");
        let mut more = counted_before;
        more.engine.as_mut().unwrap().counters.impressions += 1;
        assert!(
            !restored.carry_on_from(more),
            "more impressions than counted"
        );
        assert_eq!(restored.counted_before().groups, [None]);
    }

    #[test]
    fn a_failed_save_leaves_no_temporary_file_and_start_removes_a_stale_one() {
        let dir = tempfile::tempdir().unwrap();
        let (engine, _) = engine_with_traffic();
        let file = StateFile::new(dir.path(), "fingerprint".into());
        fs::write(file.temporary(), b"half a state").unwrap();
        assert_eq!(
            file.prepare().unwrap(),
            Some(file.temporary()),
            "a stale temporary file was there"
        );
        assert!(!file.temporary().exists());
        // The rename over a directory that is not empty fails.
        fs::create_dir_all(file.path().join("in-the-way")).unwrap();
        assert!(matches!(
            file.save(&engine.encode_state(Default::default()).unwrap()),
            Err(StateError::Io { .. })
        ));
        assert!(!file.temporary().exists());
        assert_eq!(file.prepare().unwrap(), None);
    }

    #[test]
    fn a_state_dir_that_is_a_file_is_unusable() {
        let dir = tempfile::tempdir().unwrap();
        let not_a_dir = dir.path().join("state");
        fs::write(&not_a_dir, b"").unwrap();
        let error = StateFile::new(&not_a_dir, String::new())
            .prepare()
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "state_dir {} is a file, not a directory: point state_dir at a directory (it is created if missing), or move the file away",
                not_a_dir.display()
            )
        );
    }

    #[test]
    fn a_link_to_nothing_in_the_state_files_place_is_set_aside_not_taken_as_no_state() {
        let dir = tempfile::tempdir().unwrap();
        let file = StateFile::new(dir.path(), String::new());
        std::os::unix::fs::symlink(dir.path().join("gone"), file.path()).unwrap();
        let error = file
            .load()
            .err()
            .expect("a link to nothing was taken as no state");
        assert!(
            matches!(error, StateError::Corrupt { .. })
                && error.to_string().contains("a link to nothing"),
            "{error}"
        );
        let aside = file.set_aside().unwrap();
        assert!(
            fs::symlink_metadata(aside).unwrap().is_symlink(),
            "the link itself is kept"
        );
    }

    #[test]
    fn a_directory_in_the_temporary_files_place_is_named_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let file = StateFile::new(dir.path(), String::new());
        fs::create_dir_all(file.temporary().join("something")).unwrap();
        let error = file.prepare().unwrap_err().to_string();
        assert!(
            error.contains(&format!(
                "a directory that is not empty at {}",
                file.temporary().display()
            )) && error.contains("move it away"),
            "{error}"
        );
    }

    #[test]
    fn refuses_damaged_and_foreign_files() {
        let dir = tempfile::tempdir().unwrap();
        let (engine, _) = engine_with_traffic();
        let file = StateFile::new(dir.path(), "k=[1]".into());
        assert!(file.load().unwrap().is_none(), "no file is no state");
        file.save(&engine.encode_state(Default::default()).unwrap())
            .unwrap();
        let other = StateFile::new(dir.path(), "k=[2]".into());
        assert!(matches!(other.load(), Err(StateError::Incompatible { .. })));
        let mut bytes = fs::read(file.path()).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        fs::write(file.path(), &bytes).unwrap();
        assert!(matches!(file.load(), Err(StateError::Corrupt { .. })));
        let aside = file.set_aside().unwrap();
        assert!(aside.exists() && !file.path().exists());
    }

    #[test]
    fn an_incompatible_file_says_which_settings_changed_and_how_to_keep_it() {
        let dir = tempfile::tempdir().unwrap();
        let (engine, settings) = engine_with_traffic();
        let windows = [std::time::Duration::from_secs(60)];
        let saved = StateFile::new(dir.path(), settings.fingerprint(&windows));
        saved
            .save(&engine.encode_state(Default::default()).unwrap())
            .unwrap();
        let mut other = settings.clone();
        other.k = vec![1, 3];
        let running = StateFile::new(dir.path(), other.fingerprint(&windows));
        let message = running.load().err().unwrap().to_string();
        assert!(
            message.contains("k was [1, 5, 10, 20], is [1, 3]")
                && !message.contains("metrics")
                && message.contains("put the file back as rankwatch.state"),
            "{message}"
        );
        // Metric settings are named as the settings call them, one by one.
        let mut other = settings.clone();
        other.metrics.gain = crate::metrics::Gain::Exponential;
        other.metrics.discount = crate::metrics::Discount::Jarvelin { base: 3.0 };
        other.metrics.rbp_persistence = 0.5;
        let running = StateFile::new(dir.path(), other.fingerprint(&windows));
        let message = running.load().err().unwrap().to_string();
        assert!(
            message.contains("(gain was linear, is exponential; discount was log2, is jarvelin { base: 3.0 }; rbp_p was 0.8, is 0.5)"),
            "{message}"
        );
    }

    #[test]
    fn join_rules_are_read_back_and_a_build_before_them_reads_the_state_as_it_did() {
        use std::time::Duration;
        let dir = tempfile::tempdir().unwrap();
        let (engine, _) = engine_with_traffic();
        let rules = JoinRules {
            attribution_window: Duration::from_secs(300),
            allowed_lateness: Duration::from_secs(30),
            grades: vec![("click".into(), 1.0), ("view".into(), 0.0)],
        };
        let saved = StateFile::new(dir.path(), "k=[1]".into()).with_join_rules(rules.clone());
        saved
            .save(&engine.encode_state(Default::default()).unwrap())
            .unwrap();
        // A grade of -0 is 0: compared as numbers.
        let same = JoinRules {
            grades: vec![("click".into(), 1.0), ("view".into(), -0.0)],
            ..rules.clone()
        };
        let running = StateFile::new(dir.path(), "k=[1]".into()).with_join_rules(same);
        assert!(running
            .load()
            .unwrap()
            .unwrap()
            .join_rules_changed
            .is_none());
        let other = JoinRules {
            attribution_window: Duration::from_secs(600),
            grades: vec![("click".into(), 2.0), ("view".into(), 0.0)],
            ..rules
        };
        let running = StateFile::new(dir.path(), "k=[1]".into()).with_join_rules(other);
        let changed = running.load().unwrap().unwrap().join_rules_changed;
        assert_eq!(
            changed.as_deref(),
            Some("attribution_window was 5m, is 10m; grade of click was 1, is 2")
        );
        // What a build before join rules decodes: the fingerprint and the state.
        let bytes = fs::read(saved.path()).unwrap();
        let (fingerprint, _): (String, EngineState) =
            postcard::from_bytes(&bytes[HEADER_LEN..]).unwrap();
        assert_eq!(fingerprint, "k=[1]");
        // A file such a build wrote, or rules this build cannot read: the
        // state is restored, and nothing is said.
        let payload = postcard::to_stdvec(&("k=[1]", engine.to_state())).unwrap();
        for tail in [&b""[..], b"\xff\xff\xff", b"\x05abc"] {
            fs::write(saved.path(), framed(&[&payload[..], tail].concat())).unwrap();
            let loaded = running.load().unwrap().unwrap();
            assert!(loaded.join_rules_changed.is_none(), "{tail:?}");
        }
    }

    #[test]
    fn counters_added_later_are_kept_after_the_rest_and_start_at_0_from_an_older_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut settings =
            EngineSettings::resolve(&EngineArgs::default(), &FileSettings::default()).unwrap();
        settings.max_open_items = 2;
        settings.max_open_credits = 0;
        let windows = [std::time::Duration::from_secs(60)];
        let mut engine = Engine::new(settings.join(&windows), settings.evaluator());
        let validator = settings.validator(None);
        let shed = |engine: &mut Engine, user: &str| {
            let line = format!(
                r#"{{"impression":{{"requestId":"r","userId":"{user}","itemIds":["a"],"time":"2026-11-01T10:00:00Z"}}}}"#
            );
            engine.apply(parse_line(&line, &validator).unwrap());
        };
        let click = |engine: &mut Engine| {
            let line = r#"{"interaction":{"requestId":"r","userId":"u1","itemId":"a","type":"click","time":"2026-11-01T10:00:00Z"}}"#;
            engine.apply(parse_line(line, &validator).unwrap());
        };
        for user in ["u1", "u2", "u3"] {
            shed(&mut engine, user);
        }
        click(&mut engine);
        engine.reset_exported_counters();
        shed(&mut engine, "u4");
        click(&mut engine);
        click(&mut engine);
        assert_eq!(engine.counters().shed_open_items, 2);
        assert_eq!(engine.counters().shed_open_credits, 3);
        let file = StateFile::new(dir.path(), "k=[1]".into());
        file.save(&engine.encode_state(Default::default()).unwrap())
            .unwrap();
        let state = file.load().unwrap().unwrap().state;
        assert_eq!(state.later_counters(), engine.to_state().later_counters());
        let counted_before = state.counted_before.clone();
        let mut restored = Engine::from_state(settings.join(&windows), settings.evaluator(), state);
        assert!(restored.carry_on_from(counted_before));
        assert_eq!(restored.counters(), engine.counters());
        assert_eq!(restored.engine_before(), engine.engine_before());
        let before = &restored.engine_before().unwrap().counters;
        assert_eq!((before.shed_open_items, before.shed_open_credits), (1, 1));

        // A file of the build that kept only the items' count: it is
        // restored, the credits' count at 0.
        let state = engine.to_state();
        let items_only: [[u64; 2]; 1] = [[2, 1]];
        let trailer = (JoinRules::default(), &state.counted_before, items_only);
        let payload = postcard::to_stdvec(&("k=[1]", &state, trailer)).unwrap();
        fs::write(file.path(), framed(&payload)).unwrap();
        let state = file.load().unwrap().unwrap().state;
        let before = &state.counted_before.engine.as_ref().unwrap().counters;
        assert_eq!((before.shed_open_items, before.shed_open_credits), (1, 0));
        let restored = Engine::from_state(settings.join(&windows), settings.evaluator(), state);
        let counters = restored.counters();
        assert_eq!(
            (counters.shed_open_items, counters.shed_open_credits),
            (2, 0)
        );

        // A file of a build before them: everything else is restored.
        let state = engine.to_state();
        let payload = postcard::to_stdvec(&(
            "k=[1]",
            &state,
            (JoinRules::default(), &state.counted_before),
        ))
        .unwrap();
        fs::write(file.path(), framed(&payload)).unwrap();
        let state = file.load().unwrap().unwrap().state;
        assert_eq!(state.later_counters(), LaterCounters::default());
        let before = state.counted_before.engine.as_ref().unwrap();
        assert_eq!(before.counters.impressions, 2);
        let restored = Engine::from_state(settings.join(&windows), settings.evaluator(), state);
        assert_eq!(restored.counters().shed_open_items, 0);
        assert_eq!(restored.counters().impressions, 2);
    }

    #[test]
    fn a_file_set_aside_never_replaces_one_set_aside_before() {
        let dir = tempfile::tempdir().unwrap();
        let file = StateFile::new(dir.path(), "k=[1]".into());
        let mut aside = Vec::new();
        for content in ["first", "second", "third"] {
            fs::write(file.path(), content).unwrap();
            aside.push(file.set_aside().unwrap());
        }
        let kept: Vec<String> = aside
            .iter()
            .map(|path| fs::read_to_string(path).unwrap())
            .collect();
        assert_eq!(kept, ["first", "second", "third"], "{aside:?}");
    }
}
