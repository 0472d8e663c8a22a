//! Event time: nanoseconds since the Unix epoch, and the RFC 3339 parser of
//! the JSON mapping.

/// Event time in nanoseconds since 1970-01-01T00:00:00Z. An `i64` spans the
/// years 1678 to 2262; times outside that range are rejected as invalid.
pub type Nanos = i64;

/// Nanoseconds in one second.
pub const NANOS_PER_SECOND: i64 = 1_000_000_000;

/// A protobuf `Timestamp` as nanoseconds, or `None` when it is out of range.
pub(super) fn from_timestamp(seconds: i64, nanos: i32) -> Option<Nanos> {
    if !(0..NANOS_PER_SECOND as i32).contains(&nanos) {
        return None;
    }
    seconds
        .checked_mul(NANOS_PER_SECOND)?
        .checked_add(i64::from(nanos))
}

/// Parses an RFC 3339 timestamp (`2026-11-01T10:00:04.250Z`, any offset,
/// up to nine fractional digits) as the proto3 JSON mapping writes them.
pub fn parse_rfc3339(text: &str) -> Option<Nanos> {
    let (date_time, rest) = text.as_bytes().split_first_chunk::<19>()?;
    let [y0, y1, y2, y3, b'-', mo0, mo1, b'-', d0, d1, b'T' | b't' | b' ', h0, h1, b':', mi0, mi1, b':', s0, s1] =
        *date_time
    else {
        return None;
    };
    let year = number([y0, y1, y2, y3])?;
    let month = number([mo0, mo1])?;
    let day = number([d0, d1])?;
    let hour = number([h0, h1])?;
    let minute = number([mi0, mi1])?;
    let second = number([s0, s1])?;
    if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let (fraction, zone) = match rest {
        [b'.', after_dot @ ..] => fraction(after_dot)?,
        _ => (0, rest),
    };
    let offset_seconds = match *zone {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h0, h1, b':', m0, m1] => {
            let hours = number([h0, h1])?;
            let minutes = number([m0, m1])?;
            if hours > 23 || minutes > 59 {
                return None;
            }
            let offset = hours * 3600 + minutes * 60;
            if sign == b'-' {
                -offset
            } else {
                offset
            }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset_seconds;
    seconds.checked_mul(NANOS_PER_SECOND)?.checked_add(fraction)
}

/// The nanoseconds that one to nine digits after a decimal point stand
/// for, and the bytes after the digits.
fn fraction(after_dot: &[u8]) -> Option<(i64, &[u8])> {
    /// Nanoseconds per unit of the last of `n` fractional digits, at `n`.
    const UNIT: [i64; 10] = [
        0,
        100_000_000,
        10_000_000,
        1_000_000,
        100_000,
        10_000,
        1_000,
        100,
        10,
        1,
    ];
    let mut value = 0;
    let mut count = 0;
    for &byte in after_dot.iter().take(UNIT.len()) {
        let digit = byte.wrapping_sub(b'0');
        if digit > 9 {
            break;
        }
        value = value * 10 + i64::from(digit);
        count += 1;
    }
    let unit = *UNIT.get(count).filter(|&&unit| unit > 0)?;
    Some((value * unit, after_dot.get(count..)?))
}

/// Formats nanoseconds as RFC 3339 in UTC with millisecond precision.
pub fn format_rfc3339(time: Nanos) -> String {
    let seconds = time.div_euclid(NANOS_PER_SECOND);
    let millis = time.rem_euclid(NANOS_PER_SECOND) / 1_000_000;
    let (days, second_of_day) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        second_of_day / 3600,
        second_of_day % 3600 / 60,
        second_of_day % 60
    )
}

/// The value of a fixed number of decimal digits, or `None` when a byte is
/// not a digit. One check for all of them keeps the common case branch-free.
fn number<const N: usize>(digits: [u8; N]) -> Option<i64> {
    let mut value = 0;
    let mut all_digits = true;
    for byte in digits {
        let digit = byte.wrapping_sub(b'0');
        all_digits &= digit < 10;
        value = value * 10 + i64::from(digit);
    }
    all_digits.then_some(value)
}

fn is_leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_utc_and_offsets() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_rfc3339("1970-01-01T00:00:01.5Z"), Some(1_500_000_000));
        assert_eq!(parse_rfc3339("1970-01-01T01:00:00+01:00"), Some(0));
        assert_eq!(
            parse_rfc3339("2026-11-01T10:00:04.250Z"),
            Some(1_793_527_204_250_000_000)
        );
        assert_eq!(
            parse_rfc3339("2024-02-29T00:00:00.000000001Z"),
            Some(1_709_164_800_000_000_001)
        );
    }

    #[test]
    fn rejects_malformed() {
        for text in [
            "",
            "2026-11-01",
            "2026-11-01T10:00:04",
            "2026-13-01T00:00:00Z",
            "2023-02-29T00:00:00Z",
            "2026-11-01T24:00:00Z",
            "2026-11-01T10:00:04.Z",
            "2026-11-01T10:00:04.1234567890Z",
            "9999-12-31T23:59:59Z",
        ] {
            assert_eq!(parse_rfc3339(text), None, "{text}");
        }
    }

    #[test]
    fn rejects_a_non_digit_wherever_a_digit_belongs() {
        let valid = "2026-11-01T10:00:04.250+05:30";
        assert_eq!(parse_rfc3339(valid), Some(1_793_507_404_250_000_000));
        for (position, _) in valid.match_indices(|c: char| c.is_ascii_digit()) {
            // The bytes just below '0' and just above '9', and a letter.
            for byte in ["/", ":", "x"] {
                let mut text = valid.to_owned();
                text.replace_range(position..=position, byte);
                assert_eq!(parse_rfc3339(&text), None, "{text}");
            }
        }
    }

    #[test]
    fn formats_what_it_parses() {
        let time = parse_rfc3339("2026-11-01T10:00:04.250Z").unwrap();
        assert_eq!(format_rfc3339(time), "2026-11-01T10:00:04.250Z");
    }
}
