//! Wall-clock time as people read and write it: instants in UTC (chrono does the calendar) and
//! spans (`14d`). sheaf's own rule is which zones an instant may name: one is required, so that
//! the server's zone never decides what a date means.

use chrono::{DateTime, NaiveDateTime, Utc};

/// The current time in UTC, to the second: `2026-11-21T08:30:00Z`.
pub fn utc_now() -> String {
    utc(now_ms().div_euclid(1000))
}

/// Milliseconds since 1970-01-01 UTC (0 on a clock before it).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// Seconds since 1970-01-01 in UTC as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc(secs: i64) -> String {
    instant(secs * 1000).format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Milliseconds since the epoch as RFC 3339 in UTC, to the millisecond: `2026-11-29T10:15:00.250Z`
/// (a log line's time).
pub fn utc_precise(ms: i64) -> String {
    instant(ms).format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

/// Milliseconds since the epoch as PostgreSQL reads a UTC time: `2026-11-22 10:15:00.250+00`.
pub fn utc_ms(ms: i64) -> String {
    instant(ms).format("%Y-%m-%d %H:%M:%S%.3f+00").to_string()
}

/// `ms` as a chrono instant, held to the range chrono can represent.
fn instant(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or(if ms < 0 { DateTime::<Utc>::MIN_UTC } else { DateTime::<Utc>::MAX_UTC })
}

/// Parse an instant with its zone: `2026-11-22 10:15:00+00`, `2026-11-22T10:15:00.123Z`,
/// `... UTC`, `... +01:00`, `... -0500`, into milliseconds since the epoch (fractions past the
/// millisecond dropped). A zone is required: without one the reader's zone would decide.
///
/// # Errors
/// What is wrong with the text, in words for a message that names the flag and gives an example.
pub fn parse_instant(text: &str) -> Result<i64, String> {
    let t = text.trim();
    // The date and time end where the zone begins: at a letter other than the `T` between them,
    // a space, or a sign after the time.
    let zone_at = t.char_indices().skip(11).find(|&(_, c)| c == ' ' || c == '+' || c == '-' || (c.is_alphabetic() && c != 'T')).map_or(t.len(), |(i, _)| i);
    let (when, zone) = t.split_at(zone_at);
    let when = when.replacen('T', " ", 1);
    let naive = NaiveDateTime::parse_from_str(&when, "%Y-%m-%d %H:%M:%S%.f").map_err(|e| format!("not a date and time ({e})"))?;
    let offset_min: i64 = match zone.trim() {
        "Z" | "z" | "UTC" | "utc" | "GMT" | "+00" | "-00" => 0,
        "" => return Err("no time zone (the server's zone would decide); add Z, +00 or an offset like +01:00".into()),
        z if z.starts_with('+') || z.starts_with('-') => {
            let sign = if z.starts_with('-') { -1 } else { 1 };
            let digits: String = z[1..].chars().filter(|c| *c != ':').collect();
            let num = |s: &str| s.parse::<i64>().map_err(|_| "an offset must be +HH, +HHMM or +HH:MM".to_string());
            let (hh, mm) = match digits.len() {
                2 => (num(&digits)?, 0),
                4 => (num(&digits[..2])?, num(&digits[2..])?),
                _ => return Err("an offset must be +HH, +HHMM or +HH:MM".into()),
            };
            if hh > 15 || mm > 59 {
                return Err("offset out of range".into());
            }
            sign * (hh * 60 + mm)
        }
        _ => return Err("a time zone sheaf does not read (use Z, UTC or an offset such as +01:00)".into()),
    };
    Ok(naive.and_utc().timestamp_millis() - offset_min * 60_000)
}

/// A span as people write it (`14d`, `36h`, `90m`, `600s`, `2w`; a bare number is seconds) in
/// seconds: the one parser of every duration flag and setting.
///
/// # Errors
/// No number, another unit, or zero; the message names the forms (the caller names the flag).
pub fn parse_span(text: &str) -> crate::error::Result<i64> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (n, unit) = t.split_at(split);
    let n: i64 = n.parse().map_err(|_| crate::error::Error::invalid(format!("'{text}': write a number and a unit, e.g. 14d, 36h, 90m, 30s")))?;
    let mult = match unit.trim() {
        "" | "s" | "sec" => 1,
        "m" | "min" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        _ => return Err(crate::error::Error::invalid(format!("'{text}': units are s, m, h, d, w (e.g. 14d)"))),
    };
    if n == 0 {
        return Err(crate::error::Error::invalid(format!("'{text}': give a span longer than zero")));
    }
    n.checked_mul(mult).ok_or_else(|| crate::error::Error::invalid(format!("'{text}': too long a span")))
}

/// [`parse_span`] as a [`std::time::Duration`].
///
/// # Errors
/// As [`parse_span`].
pub fn parse_duration(text: &str) -> crate::error::Result<std::time::Duration> {
    parse_span(text).map(|s| std::time::Duration::from_secs(s as u64))
}

/// Seconds as a span people read: `45 s`, `12 min`, `5.5 h`, `3.2 d`.
pub fn span(secs: i64) -> String {
    let s = secs.max(0) as f64;
    match secs {
        ..120 => format!("{secs} s"),
        120..7200 => format!("{:.0} min", s / 60.0),
        7200..172_800 => format!("{:.1} h", s / 3600.0),
        _ => format!("{:.1} d", s / 86_400.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc(1_795_257_045), "2026-11-21T10:30:45Z");
        assert_eq!(utc_ms(1_795_257_045_250), "2026-11-21 10:30:45.250+00");
    }

    #[test]
    fn instants_with_zones() {
        let base = parse_instant("2026-11-21 10:30:45Z").unwrap();
        assert_eq!(base, 1_795_257_045_000);
        assert_eq!(parse_instant("2026-11-21T10:30:45+00").unwrap(), base);
        assert_eq!(parse_instant("2026-11-21 11:30:45+01:00").unwrap(), base);
        assert_eq!(parse_instant("2026-11-21 05:30:45-0500").unwrap(), base);
        assert_eq!(parse_instant("2026-11-21 10:30:45.25 UTC").unwrap(), base + 250);
        assert_eq!(parse_instant("2026-11-21T10:30:45.123456Z").unwrap(), base + 123);
        assert_eq!(parse_instant("2000-02-29 00:00:00Z").unwrap(), 951_782_400_000);
        assert_eq!(parse_instant(&utc_ms(1_795_257_045_250)).unwrap(), 1_795_257_045_250);
        for bad in [
            "2026-11-21 10:30:45",
            "2026-13-01 00:00:00Z",
            "yesterday",
            "2026-11-21 10:30:45 CET",
            "2026-02-29 00:00:00Z",
            "2026-04-31 00:00:00Z",
            "2026-11-21 10:30:€Z",
            "2026-11-21 10:30:45.Z",
            "2026-11-21 10:30:45+1",
        ] {
            assert!(parse_instant(bad).is_err(), "{bad}");
        }
        assert!(parse_instant("2026-11-21 10:30:45").unwrap_err().contains("zone"));
    }

    #[test]
    fn spans_parse_and_print() {
        assert_eq!(parse_span("14d").unwrap(), 14 * 86_400);
        assert_eq!(parse_span("90m").unwrap(), 5400);
        assert_eq!(parse_span(" 2w").unwrap(), 14 * 86_400);
        // One parser for every duration: a bare number is seconds, so 60 and 60s agree.
        assert_eq!(parse_span("60").unwrap(), 60);
        assert_eq!(parse_span("8s").unwrap(), 8);
        assert_eq!(parse_duration("26h").unwrap(), std::time::Duration::from_secs(26 * 3600));
        for bad in ["", "d", "3y", "0h", "-1d", "99999999999999999w"] {
            assert!(parse_span(bad).is_err(), "{bad}");
        }
        assert_eq!((span(45), span(720), span(19_800), span(3 * 86_400)), ("45 s".into(), "12 min".into(), "5.5 h".into(), "3.0 d".into()));
    }
}
