//! Client values inside messages: acks, logs and replay's standard error
//! quote at most a short prefix of a value a client sent, with its length
//! when it was cut, so that a message stays small whatever the client sent.

use std::fmt;

/// Most characters of a client value that a message quotes.
pub const QUOTED_CHARS: usize = 64;

/// `value` as a message quotes it: escaped, and cut to [`QUOTED_CHARS`]
/// characters (on a character boundary) followed by its length in bytes
/// when it is longer.
pub fn quoted(value: &str) -> Quoted<'_> {
    Quoted(value)
}

/// Most characters of a message that may carry client text.
const MESSAGE_CHARS: usize = 256;

/// The head of `value`: its first `chars` characters, or all of it.
fn head(value: &str, chars: usize) -> &str {
    match value.char_indices().nth(chars) {
        Some((cut, _)) => &value[..cut],
        None => value,
    }
}

/// A client value as a message shows it; see [`quoted`].
#[derive(Clone, Copy, Debug)]
pub struct Quoted<'a>(&'a str);

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let head = head(self.0, QUOTED_CHARS);
        if head.len() == self.0.len() {
            return write!(f, "{head:?}");
        }
        write!(f, "{head:?}… ({} bytes)", self.0.len())
    }
}

/// A message that may carry client text (a parser's error), cut like a
/// quoted value but not quoted.
pub fn cut_message(message: &str) -> String {
    let head = head(message, MESSAGE_CHARS);
    if head.len() == message.len() {
        return message.to_owned();
    }
    format!("{head}… ({} bytes)", message.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_short_values_whole_and_cuts_long_ones_on_a_char_boundary() {
        assert_eq!(quoted("clik").to_string(), r#""clik""#);
        let long = "é".repeat(1000);
        let shown = quoted(&long).to_string();
        assert_eq!(shown, format!("\"{}\"… (2000 bytes)", "é".repeat(64)));
        let escaped = quoted(&"\n".repeat(1 << 20)).to_string();
        assert!(escaped.len() < 200, "{}", escaped.len());
        assert_eq!(
            cut_message(&"x".repeat(300)),
            format!("{}… (300 bytes)", "x".repeat(256))
        );
    }
}
