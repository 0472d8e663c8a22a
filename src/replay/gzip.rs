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

/// The decompressed text of a gzip log.
pub(super) struct Members<R> {
    /// The member being read; `None` once the last has ended.
    member: Option<GzDecoder<BufReader<Counting<R>>>>,
}

impl<R: Read> Members<R> {
    /// Reads the members of `raw`, which starts with gzip's header.
    pub(super) fn new(raw: R) -> Self {
        let raw = BufReader::with_capacity(
            BUFFER,
            Counting {
                inner: raw,
                read: 0,
            },
        );
        Self {
            member: Some(GzDecoder::new(raw)),
        }
    }
}

impl<R: Read> Read for Members<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let Some(member) = &mut self.member else {
                return Ok(0);
            };
            let read = member.read(buf)?;
            if read > 0 || buf.is_empty() {
                return Ok(read);
            }
            // The member ended: another follows, or zeros, or the end.
            let Some(member) = self.member.take() else {
                return Ok(0);
            };
            let mut rest = member.into_inner();
            if starts_another_member(&mut rest)? {
                self.member = Some(GzDecoder::new(rest));
            }
        }
    }
}

/// Whether `rest`, just past a member, starts another: `false` at its end
/// (zeros passed over), an error when anything else follows.
fn starts_another_member<R: Read>(rest: &mut BufReader<Counting<R>>) -> io::Result<bool> {
    let ends_at = rest.get_ref().read - rest.buffer().len() as u64;
    let head = rest.fill_buf()?;
    if head.first() == Some(&GZIP_ID1) {
        // A bad header after it is the member's own error.
        return Ok(true);
    }
    let quoted: Vec<String> = head
        .iter()
        .take(QUOTED)
        .map(|b| format!("{b:02x}"))
        .collect();
    loop {
        let head = rest.fill_buf()?;
        if head.is_empty() {
            return Ok(false);
        }
        if head.iter().any(|&b| b != 0) {
            break;
        }
        let zeros = head.len();
        rest.consume(zeros);
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "the gzip data ends at byte {ends_at}, and what follows (starting {}) is not another gzip member: a damaged member, or other data appended to the file",
            quoted.join(" ")
        ),
    ))
}

/// The first byte of a gzip member.
const GZIP_ID1: u8 = 0x1f;

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
