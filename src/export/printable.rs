//! Client names as the tables of `replay` and `query` print them: a name
//! is whatever a client sent, and a terminal acts on some characters.

use std::borrow::Cow;

/// `name` with its control characters (ESC, CR, LF, BEL, ...) and the
/// characters that turn text direction escaped as `\u{..}`, so that a
/// name can neither break a table's rows nor drive the terminal, and its
/// backslashes doubled, so that a name which spells `\u{1b}` is told
/// apart from one that holds ESC.
pub fn printable(name: &str) -> Cow<'_, str> {
    if !name.chars().any(|c| c == '\\' || acts_on_terminal(c)) {
        return Cow::Borrowed(name);
    }
    let mut shown = String::with_capacity(name.len() + 8);
    for c in name.chars() {
        if acts_on_terminal(c) {
            shown.extend(c.escape_unicode());
        } else if c == '\\' {
            shown.push_str(r"\\");
        } else {
            shown.push(c);
        }
    }
    Cow::Owned(shown)
}

/// Whether a terminal does something with `c` besides showing it.
fn acts_on_terminal(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::printable;

    #[test]
    fn escapes_what_a_terminal_acts_on_and_keeps_the_rest() {
        assert_eq!(printable("model-7 é 模型"), "model-7 é 模型");
        assert_eq!(
            printable("m\u{1b}]0;x\u{7}\nrow\u{202e}"),
            r"m\u{1b}]0;x\u{7}\u{a}row\u{202e}"
        );
    }

    #[test]
    fn a_name_that_spells_an_escape_is_told_apart_from_one_escaped() {
        assert_eq!(printable(r"m\u{1b}"), r"m\\u{1b}");
        assert_eq!(printable("m\u{1b}"), r"m\u{1b}");
        assert_eq!(printable(r"C:\models"), r"C:\\models");
    }
}
