//! Client names as the tables of `replay` and `query` print them: a name
//! is whatever a client sent, and a terminal acts on some characters.

use std::borrow::Cow;

/// `name` with its control characters (ESC, CR, LF, BEL, ...), line and
/// paragraph separators, and the characters a terminal shows as nothing
/// (zero-width spaces and joiners, the byte order mark, those that turn
/// text direction, ...) escaped as `\u{..}`, so that a name can neither
/// break a table's rows, nor drive the terminal, nor pass for another;
/// and its backslashes doubled, so that a name which spells `\u{1b}` is
/// told apart from one that holds ESC.
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

/// Whether a terminal does something with `c` besides showing it, or
/// shows it as nothing: a control character, a line or paragraph
/// separator, or one of Unicode's default ignorable code points
/// (DerivedCoreProperties.txt, Unicode 16).
fn acts_on_terminal(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{00ad}'
                | '\u{034f}'
                | '\u{061c}'
                | '\u{115f}'..='\u{1160}'
                | '\u{17b4}'..='\u{17b5}'
                | '\u{180b}'..='\u{180f}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{206f}'
                | '\u{3164}'
                | '\u{fe00}'..='\u{fe0f}'
                | '\u{feff}'
                | '\u{ffa0}'
                | '\u{fff0}'..='\u{fff8}'
                | '\u{1bca0}'..='\u{1bca3}'
                | '\u{1d173}'..='\u{1d17a}'
                | '\u{e0000}'..='\u{e0fff}'
        )
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

    #[test]
    fn a_name_that_looks_like_another_or_breaks_a_line_shows_what_is_hidden() {
        // Zero-width and other invisible characters: "mod\u{200b}el" must
        // not print as "model", a group of its own looking like another.
        assert_eq!(printable("mod\u{200b}el"), r"mod\u{200b}el");
        assert_eq!(printable("\u{feff}model"), r"\u{feff}model");
        assert_eq!(
            printable("a\u{2060}b\u{ad}c\u{fe0f}"),
            r"a\u{2060}b\u{ad}c\u{fe0f}"
        );
        assert_eq!(printable("a\u{e0041}"), r"a\u{e0041}");
        // Line and paragraph separators break a row in many terminals.
        assert_eq!(printable("a\u{2028}b\u{2029}"), r"a\u{2028}b\u{2029}");
        // A zero-width joiner, which emoji and some scripts need, is
        // escaped too: a table shows every part of a name, hiding none.
        assert_eq!(printable("a\u{200d}b"), r"a\u{200d}b");
    }
}
