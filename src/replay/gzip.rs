//! A gzip log of one member or several (as `cat a.gz b.gz` makes), read to
//! the end of its last member. Zeros after it, as a tape or a block device
//! pads a file, hold no data and are passed over, as `gzip -d` does; any
//! other byte there is an error that says where the gzip data ended and
//! what follows, since it may be a damaged member whose lines are lost.

use flate2::bufread::GzDecoder;
use std::io::{self, BufRead, BufReader, Read};

/// Bytes read from the log at a time, as `flate2`'s own reader takes.
const BUFFER: usize = 32 << 10;

/// Bytes after the gzip data that its error quotes.
const QUOTED: usize = 4;

/// The first byte of a gzip member.
const ID1: u8 = 0x1f;
/// The second byte of a gzip member.
const ID2: u8 = 0x8b;

/// The log's bytes, counted, buffered.
type Log<'a> = BufReader<Counting<Box<dyn Read + 'a>>>;

/// The decompressed text of a gzip log.
pub(super) struct Members<'a> {
    /// The member being read, one decoder reset for each: a new decoder
    /// per member took 14% more time over a log of one line per member.
    member: GzDecoder<Lent<'a>>,
    /// Where the member being read starts in the log.
    start: u64,
    /// Whether the last member has ended.
    ended: bool,
}

impl<'a> Members<'a> {
    /// Reads the members of `raw`, which starts with gzip's header.
    pub(super) fn new(raw: impl Read + 'a) -> Self {
        let raw: Box<dyn Read + 'a> = Box::new(raw);
        let log = BufReader::with_capacity(
            BUFFER,
            Counting {
                inner: raw,
                read: 0,
            },
        );
        Self {
            member: GzDecoder::new(Lent(Some(log))),
            start: 0,
            ended: false,
        }
    }

    /// Goes on to the member that starts where this one ended.
    fn next_member(&mut self, start: u64) {
        // A decoder is reset with the reader it is to read: its own, taken back.
        let log = self.member.get_mut().0.take();
        self.member.reset(Lent(log));
        self.start = start;
    }
}

/// The log, which a decoder being reset hands back for a moment: read
/// without it, it is empty.
struct Lent<'a>(Option<Log<'a>>);

impl Read for Lent<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.as_mut().map_or(Ok(0), |log| log.read(buf))
    }
}

impl BufRead for Lent<'_> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        self.0.as_mut().map_or(Ok(&[]), BufRead::fill_buf)
    }

    fn consume(&mut self, amount: usize) {
        if let Some(log) = &mut self.0 {
            log.consume(amount);
        }
    }
}

impl Read for Members<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while !self.ended {
            let read = self.member.read(buf).map_err(|error| match self.start {
                0 => error,
                start => in_member(start, &error),
            })?;
            if read > 0 || buf.is_empty() {
                return Ok(read);
            }
            let Some(log) = &mut self.member.get_mut().0 else {
                return Ok(0);
            };
            match what_follows(log)? {
                Follows::Member(start) => self.next_member(start),
                Follows::End => self.ended = true,
            }
        }
        Ok(0)
    }
}

/// An error `error` in the member that starts at byte `start`.
fn in_member(start: u64, error: &io::Error) -> io::Error {
    io::Error::new(
        error.kind(),
        format!("in the gzip member that starts at byte {start}: {error}"),
    )
}

/// What follows a member.
enum Follows {
    /// Another member, starting at this byte of the log.
    Member(u64),
    /// Nothing, or zeros only.
    End,
}

/// What follows in `log`, just past a member; an error when it is neither
/// another member nor zeros to the end.
fn what_follows(log: &mut Log<'_>) -> io::Result<Follows> {
    let ends_at = log.get_ref().read - log.buffer().len() as u64;
    // A lone first byte (the rest not yet read) is taken for a member,
    // whose own header check then decides.
    if let [ID1] | [ID1, ID2, ..] = log.fill_buf()? {
        return Ok(Follows::Member(ends_at));
    }
    let mut quoted: Vec<u8> = Vec::new();
    let mut zeros_only = true;
    loop {
        let head = log.fill_buf()?;
        if head.is_empty() {
            break;
        }
        quoted.extend(head.iter().take(QUOTED - quoted.len()));
        zeros_only &= head.iter().all(|&b| b == 0);
        if !zeros_only && quoted.len() == QUOTED {
            break;
        }
        let consumed = head.len();
        log.consume(consumed);
    }
    if zeros_only {
        return Ok(Follows::End);
    }
    let quoted: Vec<String> = quoted.iter().map(|b| format!("{b:02x}")).collect();
    Err(io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "the gzip data ends at byte {ends_at}, and what follows (starting {}) is not another gzip member: a damaged member, or other data appended to the file",
            quoted.join(" ")
        ),
    ))
}

/// A reader that counts the bytes read from it.
struct Counting<R> {
    inner: R,
    read: u64,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let read = self.inner.read(buf)?;
        self.read += read as u64;
        Ok(read)
    }
}
