//! A fast reader for the shape nearly every log line has: one object holding
//! an `impression` or an `interaction` whose fields are known keys with
//! plain string values and no `grade`, on a line with no backslash and no
//! control character (so every string ends at its next quote).
//! It borrows every string from the line and builds the same [`Line`] that
//! serde_json would. Anything else, valid or not, makes it return `None`,
//! and the line goes to serde_json, which stays the reference for every
//! rule of the format (escapes, `null`, unknown keys, duplicates, errors).

use super::{JsonImpression, JsonInteraction, Line, Text};
use std::borrow::Cow;

/// Reads `text` as a [`Line`], or `None` when it is not of the plain shape.
pub(super) fn line(text: &str) -> Option<Line<'_>> {
    if !is_plain(text.as_bytes()) {
        return None;
    }
    let mut cursor = Cursor { text, at: 0 };
    cursor.skip_space();
    cursor.eat(b'{')?;
    cursor.skip_space();
    let key = cursor.string()?;
    cursor.colon()?;
    let line = match key {
        "impression" => Line {
            impression: Some(cursor.impression()?),
            interaction: None,
        },
        "interaction" => Line {
            impression: None,
            interaction: Some(cursor.interaction()?),
        },
        _ => return None,
    };
    cursor.skip_space();
    cursor.eat(b'}')?;
    cursor.skip_space();
    (cursor.at == text.len()).then_some(line)
}

/// Whether `bytes` has no backslash and no control character. It looks at
/// every byte without stopping early, which the compiler vectorizes.
fn is_plain(bytes: &[u8]) -> bool {
    !bytes
        .iter()
        .fold(false, |found, &b| found | (b == b'\\') | (b < 0x20))
}

/// Sets a field that must not have been seen before (serde_json rejects a
/// repeated field, so a repeat goes to it).
fn set<T>(slot: &mut Option<T>, value: T) -> Option<()> {
    if slot.is_some() {
        return None;
    }
    *slot = Some(value);
    Some(())
}

struct Cursor<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// Spaces: on a plain line, the only whitespace there is.
    fn skip_space(&mut self) {
        while self.peek() == Some(b' ') {
            self.at += 1;
        }
    }

    /// `:` between a key and its value, with the space around it.
    fn colon(&mut self) -> Option<()> {
        self.skip_space();
        self.eat(b':')?;
        self.skip_space();
        Some(())
    }

    /// A string, borrowed: on a plain line it ends at the next quote.
    fn string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let start = self.at;
        let len = memchr::memchr(b'"', &self.text.as_bytes()[start..])?;
        self.at = start + len + 1;
        self.text.get(start..start + len)
    }

    fn text(&mut self) -> Option<Text<'a>> {
        self.string().map(|s| Text(Cow::Borrowed(s)))
    }

    /// An array of strings.
    fn strings(&mut self) -> Option<Vec<Text<'a>>> {
        let mut strings = Vec::with_capacity(32);
        self.sequence(b'[', b']', |cursor| {
            strings.push(cursor.text()?);
            Some(())
        })?;
        Some(strings)
    }

    /// An object, handing each key to `field`, which reads its value.
    fn object(&mut self, mut field: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.sequence(b'{', b'}', |cursor| {
            let key = cursor.string()?;
            cursor.colon()?;
            field(cursor, key)
        })
    }

    /// `open`, then comma-separated elements each read by `element`, then `close`.
    fn sequence(
        &mut self,
        open: u8,
        close: u8,
        mut element: impl FnMut(&mut Self) -> Option<()>,
    ) -> Option<()> {
        self.eat(open)?;
        self.skip_space();
        if self.eat(close).is_some() {
            return Some(());
        }
        loop {
            element(self)?;
            self.skip_space();
            if self.eat(close).is_some() {
                return Some(());
            }
            self.eat(b',')?;
            self.skip_space();
        }
    }

    fn impression(&mut self) -> Option<JsonImpression<'a>> {
        let mut m = JsonImpression::default();
        self.object(|cursor, key| match key {
            "requestId" | "request_id" => set(&mut m.request_id, cursor.text()?),
            "userId" | "user_id" => set(&mut m.user_id, cursor.text()?),
            "itemIds" | "item_ids" => set(&mut m.item_ids, cursor.strings()?),
            "time" => set(&mut m.time, cursor.text()?),
            "model" => set(&mut m.model, cursor.text()?),
            "surface" => set(&mut m.surface, cursor.text()?),
            _ => None,
        })?;
        Some(m)
    }

    fn interaction(&mut self) -> Option<JsonInteraction<'a>> {
        let mut x = JsonInteraction::default();
        self.object(|cursor, key| match key {
            "eventId" | "event_id" => set(&mut x.event_id, cursor.text()?),
            "userId" | "user_id" => set(&mut x.user_id, cursor.text()?),
            "itemId" | "item_id" => set(&mut x.item_id, cursor.text()?),
            "requestId" | "request_id" => set(&mut x.request_id, cursor.text()?),
            "type" => set(&mut x.kind, cursor.text()?),
            "time" => set(&mut x.time, cursor.text()?),
            _ => None,
        })?;
        Some(x)
    }
}
