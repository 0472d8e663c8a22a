//! Reading a file an operator names in the settings, within a bound: a
//! device such as /dev/zero never ends, and a file far longer than its kind
//! ever is was named by mistake, and a named pipe would keep the start
//! waiting for a writer.

use std::io::Read;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

/// The bytes of `path`, or an error past `max` bytes that asks whether it
/// is a `kind` (such as "config file"). A named pipe is refused unopened:
/// opening one that no one writes to waits for good.
pub fn read_at_most(path: &Path, max: u64, kind: &str) -> std::io::Result<Vec<u8>> {
    if std::fs::metadata(path)?.file_type().is_fifo() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("a named pipe, which would keep the start waiting for a writer: give the {kind} itself"),
        ));
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(max + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!("longer than {max} bytes; is it a {kind}?"),
        ));
    }
    Ok(bytes)
}
