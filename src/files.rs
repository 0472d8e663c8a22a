//! Reading a file an operator names in the settings, within a bound: a
//! device such as /dev/zero never ends, and a file far longer than its kind
//! ever is was named by mistake.

use std::io::Read;
use std::path::Path;

/// The bytes of `path`, or an error past `max` bytes that asks whether it
/// is a `kind` (such as "config file").
pub fn read_at_most(path: &Path, max: u64, kind: &str) -> std::io::Result<Vec<u8>> {
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
