//! Wall-clock time as people read it, without a date crate.

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
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// A span as people write it (`14d`, `36h`, `90m`, `600s`, `2w`; a bare number is seconds) in
/// seconds: the one parser of every duration flag and setting.
///
/// # Errors
/// No number, another unit, or zero; the message names the forms (the caller names the flag).
pub fn parse_span(text: &str) -> crate::Result<i64> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (n, unit) = t.split_at(split);
    let n: i64 = n.parse().map_err(|_| crate::Error::invalid(format!("'{text}': write a number and a unit, e.g. 14d, 36h, 90m, 30s")))?;
    let mult = match unit.trim() {
        "" | "s" | "sec" => 1,
        "m" | "min" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        _ => return Err(crate::Error::invalid(format!("'{text}': units are s, m, h, d, w (e.g. 14d)"))),
    };
    if n == 0 {
        return Err(crate::Error::invalid(format!("'{text}': give a span longer than zero")));
    }
    n.checked_mul(mult).ok_or_else(|| crate::Error::invalid(format!("'{text}': too long a span")))
}

/// [`parse_span`] as a [`std::time::Duration`].
///
/// # Errors
/// As [`parse_span`].
pub fn parse_duration(text: &str) -> crate::Result<std::time::Duration> {
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
        assert_eq!(super::utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(super::utc(1_795_257_045), "2026-11-21T10:30:45Z");
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
