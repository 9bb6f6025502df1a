//! Byte sizes as a DBA writes them: `64KiB`, `1MiB`, `4MB`, `1048576`.

use crate::error::{Error, Result};

/// Parse a size such as `64KiB`, `1MiB`, `16M` or `65536`. Binary units (KiB, MiB, GiB) and the short
/// forms K, M, G are powers of 1024; KB, MB, GB are powers of 1000.
///
/// # Errors
/// [`crate::error::ErrorKind::InvalidInput`] naming the text and the accepted forms.
pub fn parse_size(text: &str) -> Result<u64> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let bad = || Error::invalid(format!("'{text}' is not a size: write e.g. 65536, 64KiB, 1MiB or 4MiB"));
    if num.is_empty() {
        return Err(bad());
    }
    let n: u64 = num.parse().map_err(|_| bad())?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        _ => return Err(bad()),
    };
    n.checked_mul(mult).ok_or_else(bad)
}

/// Format a byte count with a binary unit, e.g. `1.5 MiB`.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{bytes} B")
    } else if v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[i])
    } else {
        format!("{v:.1} {}", UNITS[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse_size("64KiB").unwrap(), 65536);
        assert_eq!(parse_size("1MiB").unwrap(), 1 << 20);
        assert_eq!(parse_size("4M").unwrap(), 4 << 20);
        assert_eq!(parse_size("16mib").unwrap(), 16 << 20);
        assert_eq!(parse_size("1048576").unwrap(), 1 << 20);
        assert_eq!(parse_size("2MB").unwrap(), 2_000_000);
    }

    #[test]
    fn rejects_garbage() {
        for t in ["", "MiB", "1.5MiB", "12XB", "-1"] {
            let e = parse_size(t).unwrap_err();
            assert!(e.to_string().contains("64KiB"), "{e}");
        }
    }

    #[test]
    fn formats() {
        assert_eq!(format_size(512), "512 B");
        assert_eq!(format_size(1 << 20), "1 MiB");
        assert_eq!(format_size(1536 * 1024), "1.5 MiB");
    }
}
