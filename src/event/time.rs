//! Event time: nanoseconds since the Unix epoch, and the RFC 3339 parser of
//! the JSON mapping.

/// Event time in nanoseconds since 1970-01-01T00:00:00Z. An `i64` spans the
/// years 1678 to 2262; times outside that range are rejected as invalid.
pub type Nanos = i64;

/// Nanoseconds in one second.
pub const NANOS_PER_SECOND: i64 = 1_000_000_000;

/// A protobuf `Timestamp` as nanoseconds, or `None` when it is out of range.
pub fn from_timestamp(seconds: i64, nanos: i32) -> Option<Nanos> {
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
    let b = text.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let year = digits(&b[0..4])?;
    let month = digits(&b[5..7])?;
    let day = digits(&b[8..10])?;
    let hour = digits(&b[11..13])?;
    let minute = digits(&b[14..16])?;
    let second = digits(&b[17..19])?;
    if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let mut rest = &b[19..];
    let mut fraction = 0i64;
    if let Some((b'.', tail)) = rest.split_first() {
        let count = tail.iter().take_while(|c| c.is_ascii_digit()).count();
        if count == 0 || count > 9 {
            return None;
        }
        fraction = digits(&tail[..count])? * 10i64.pow(9 - count as u32);
        rest = &tail[count..];
    }
    let offset_seconds = match rest {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let hours = digits(&[*h1, *h2])?;
            let minutes = digits(&[*m1, *m2])?;
            if hours > 23 || minutes > 59 {
                return None;
            }
            let offset = hours * 3600 + minutes * 60;
            if *sign == b'-' {
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

fn digits(b: &[u8]) -> Option<i64> {
    b.iter().try_fold(0i64, |acc, &c| {
        c.is_ascii_digit().then(|| acc * 10 + i64::from(c - b'0'))
    })
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
    fn formats_what_it_parses() {
        let time = parse_rfc3339("2026-11-01T10:00:04.250Z").unwrap();
        assert_eq!(format_rfc3339(time), "2026-11-01T10:00:04.250Z");
    }
}
