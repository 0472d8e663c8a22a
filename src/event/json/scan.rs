//! A fast reader for the shape nearly every log line has: one object holding
//! an `impression` or an `interaction` whose fields are known keys with
//! plain string values (or an object of them, for `labels`) and no `grade`,
//! on a line with no backslash and no control character (so every string
//! ends at its next quote).
//! It borrows every string from the line and builds the same [`Line`] that
//! serde_json would. Anything else, valid or not, makes it return `None`,
//! and the line goes to serde_json, which stays the reference for every
//! rule of the format (escapes, `null`, unknown keys, duplicates, errors).

#![allow(unsafe_code)] // explained at each block (SAFETY)

use super::{JsonImpression, JsonInteraction, Labels, Line, Text};
use std::borrow::Cow;

/// Reads the line's `bytes` into `line`, which starts empty, or returns
/// `None` when they are not of the plain shape or not UTF-8 (leaving
/// `line` partly read). Filling the caller's `Line` in place saves moving
/// its few hundred bytes per event.
pub(super) fn line<'a>(bytes: &'a [u8], line: &mut Line<'a>) -> Option<()> {
    let mut on_stack = [0; STACK_WORDS];
    let mut on_heap = Vec::new();
    let words = bytes.len().div_ceil(64);
    let quotes = if words <= STACK_WORDS {
        &mut on_stack[..words]
    } else {
        on_heap.resize(words, 0);
        &mut on_heap[..]
    };
    let text = match index_quotes(bytes, quotes) {
        Bytes::Ascii => {
            // SAFETY: ASCII bytes are valid UTF-8.
            unsafe { std::str::from_utf8_unchecked(bytes) }
        }
        Bytes::Unicode => std::str::from_utf8(bytes).ok()?,
        Bytes::NotPlain => return None,
    };
    let mut cursor = Cursor {
        text,
        quotes,
        at: 0,
    };
    cursor.skip_space();
    cursor.eat(b'{')?;
    cursor.skip_space();
    let key = cursor.string()?;
    cursor.colon()?;
    match key {
        "impression" => cursor.impression(line.impression.insert(JsonImpression::default()))?,
        "interaction" => cursor.interaction(line.interaction.insert(JsonInteraction::default()))?,
        _ => return None,
    }
    cursor.skip_space();
    cursor.eat(b'}')?;
    cursor.skip_space();
    (cursor.at == text.len()).then_some(())
}

/// Lines up to 64 times this long index their quotes on the stack.
const STACK_WORDS: usize = 32;

/// What [`index_quotes`] found in a line besides its quotes.
enum Bytes {
    /// Plain, and all ASCII, so valid UTF-8 with no further check.
    Ascii,
    /// Plain, with bytes past ASCII: UTF-8 only if the full check says so.
    Unicode,
    /// A backslash or a control character.
    NotPlain,
}

/// Sets bit `i % 64` of `quotes[i / 64]` for each quote at `bytes[i]`, in
/// one pass that also tells whether the line is plain (no backslash and no
/// control character: every string of a plain line ends at its next
/// quote) and whether it is all ASCII, which saves a pass of its own.
fn index_quotes(bytes: &[u8], quotes: &mut [u64]) -> Bytes {
    let mut not_plain = 0;
    let mut not_ascii = 0;
    for (word, block) in quotes.iter_mut().zip(bytes.chunks(64)) {
        let (sixteens, tail) = block.as_chunks::<16>();
        for (shift, sixteen) in (0..).step_by(16).zip(sixteens) {
            let found = classify(sixteen);
            *word |= u64::from(found.quotes) << shift;
            not_plain |= found.not_plain;
            not_ascii |= found.not_ascii;
        }
        if !tail.is_empty() {
            // The last few bytes, padded with letters, which are none of these.
            let mut padded = [b'a'; 16];
            padded[..tail.len()].copy_from_slice(tail);
            let found = classify(&padded);
            *word |= u64::from(found.quotes) << (block.len() - tail.len());
            not_plain |= found.not_plain;
            not_ascii |= found.not_ascii;
        }
    }
    match (not_plain, not_ascii) {
        (0, 0) => Bytes::Ascii,
        (0, _) => Bytes::Unicode,
        _ => Bytes::NotPlain,
    }
}

/// A bit per byte of 16, for each class [`index_quotes`] looks for.
#[derive(Debug, PartialEq)]
struct Classes {
    quotes: u16,
    /// Backslashes and control characters.
    not_plain: u16,
    /// Bytes past ASCII.
    not_ascii: u16,
}

/// Classifies 16 bytes.
#[cfg(target_arch = "x86_64")]
fn classify(bytes: &[u8; 16]) -> Classes {
    use std::arch::x86_64::*;
    // SAFETY: SSE2 is part of every x86_64 CPU, and the load reads exactly
    // the 16 bytes of `bytes`.
    unsafe {
        let v = _mm_loadu_si128(bytes.as_ptr().cast());
        let quotes = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8));
        let backslashes = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8));
        let controls = _mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(0x1f)), v);
        Classes {
            quotes: _mm_movemask_epi8(quotes) as u16,
            not_plain: _mm_movemask_epi8(_mm_or_si128(backslashes, controls)) as u16,
            // A byte's top bit is set exactly when it is past ASCII.
            not_ascii: _mm_movemask_epi8(v) as u16,
        }
    }
}

/// Classifies 16 bytes.
#[cfg(not(target_arch = "x86_64"))]
fn classify(bytes: &[u8; 16]) -> Classes {
    classify_bytewise(bytes)
}

/// [`classify`] a byte at a time (on x86_64, the reference in its test).
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
fn classify_bytewise(bytes: &[u8; 16]) -> Classes {
    let bits =
        |class: fn(u8) -> bool| (0..16).fold(0, |bits, i| bits | u16::from(class(bytes[i])) << i);
    Classes {
        quotes: bits(|b| b == b'"'),
        not_plain: bits(|b| b == b'\\' || b < 0x20),
        not_ascii: bits(|b| !b.is_ascii()),
    }
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

struct Cursor<'a, 'q> {
    text: &'a str,
    /// Where the quotes of `text` are, as [`index_quotes`] sets them.
    quotes: &'q [u64],
    at: usize,
}

impl<'a> Cursor<'a, '_> {
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
        let end = self.next_quote()?;
        self.at = end + 1;
        self.text.get(start..end)
    }

    /// Where the first quote at or after `at` is.
    fn next_quote(&self) -> Option<usize> {
        let mut word = self.at / 64;
        let mut bits = self.quotes.get(word)? & (!0 << (self.at % 64));
        while bits == 0 {
            word += 1;
            bits = *self.quotes.get(word)?;
        }
        Some(word * 64 + bits.trailing_zeros() as usize)
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

    /// An object of strings, as `labels` is.
    fn labels(&mut self) -> Option<Labels<'a>> {
        let mut pairs = Vec::new();
        self.object(|cursor, key| {
            pairs.push((Text(Cow::Borrowed(key)), cursor.text()?));
            Some(())
        })?;
        Some(Labels(pairs))
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

    fn impression(&mut self, m: &mut JsonImpression<'a>) -> Option<()> {
        self.object(|cursor, key| match key {
            "requestId" | "request_id" => set(&mut m.request_id, cursor.text()?),
            "userId" | "user_id" => set(&mut m.user_id, cursor.text()?),
            "itemIds" | "item_ids" => set(&mut m.item_ids, cursor.strings()?),
            "time" => set(&mut m.time, cursor.text()?),
            "model" => set(&mut m.model, cursor.text()?),
            "surface" => set(&mut m.surface, cursor.text()?),
            "labels" => set(&mut m.labels, cursor.labels()?),
            _ => None,
        })
    }

    fn interaction(&mut self, x: &mut JsonInteraction<'a>) -> Option<()> {
        self.object(|cursor, key| match key {
            "eventId" | "event_id" => set(&mut x.event_id, cursor.text()?),
            "userId" | "user_id" => set(&mut x.user_id, cursor.text()?),
            "itemId" | "item_id" => set(&mut x.item_id, cursor.text()?),
            "requestId" | "request_id" => set(&mut x.request_id, cursor.text()?),
            "type" => set(&mut x.kind, cursor.text()?),
            "time" => set(&mut x.time, cursor.text()?),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{classify, classify_bytewise};

    #[test]
    fn classifies_every_byte_at_every_position_as_a_byte_at_a_time_does() {
        for byte in 0..=u8::MAX {
            for position in 0..16 {
                let mut block = [b'a'; 16];
                block[position] = byte;
                assert_eq!(
                    classify(&block),
                    classify_bytewise(&block),
                    "{byte} at {position}"
                );
            }
        }
        let mixed: [u8; 16] = *b"\"a\\\x1f \x7f\xe9\"\x00\"b\x20\x1f\"\\\x80";
        assert_eq!(classify(&mixed), classify_bytewise(&mixed));
        assert_eq!(classify_bytewise(&mixed).quotes, 0b0010_0010_1000_0001);
        assert_eq!(classify_bytewise(&mixed).not_ascii, 0b1000_0000_0100_0000);
    }
}
