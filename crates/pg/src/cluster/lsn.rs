//! A WAL position, as one type: [`Lsn`], a byte position in the cluster's WAL (PostgreSQL's
//! `XLogRecPtr`, SQL's `pg_lsn`), as tokio-postgres' `PgLsn` is. It reads and writes the text
//! PostgreSQL uses, `X/Y` (the high and low 32 bits in upper-case hex, e.g. `16/B374D848`), and
//! JSON holds it as that same string, so that every record written before it still reads and
//! every record written now reads the same. The segment a position falls in is asked of it here;
//! names of WAL files stay in [`crate::cluster::walname`].

use std::fmt;
use std::ops::AddAssign;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sheaf_core::Error;

/// A WAL position: bytes from the start of the cluster's WAL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Lsn(pub u64);

impl Lsn {
    /// The first byte of segment `segno`, for segments of `seg_size` bytes.
    pub fn at_segment(segno: u64, seg_size: u64) -> Lsn {
        Lsn(segno * seg_size)
    }

    /// The number of the segment this position falls in, for segments of `seg_size` bytes.
    pub fn segment_number(self, seg_size: u64) -> u64 {
        self.0 / seg_size
    }

    /// Where this position lies in its segment, in bytes from the segment's start.
    pub fn segment_offset(self, seg_size: u64) -> u64 {
        self.0 % seg_size
    }

    /// The first byte of the segment this position falls in.
    pub fn segment_start(self, seg_size: u64) -> Lsn {
        Lsn(self.0 - self.0 % seg_size)
    }

    /// `bytes` before this position, or the start of the WAL when it is nearer.
    pub fn saturating_sub(self, bytes: u64) -> Lsn {
        Lsn(self.0.saturating_sub(bytes))
    }

    /// The WAL bytes from `earlier` to this position: 0 when `earlier` is not before it.
    pub fn bytes_since(self, earlier: Lsn) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

/// `bytes` further on.
impl AddAssign<u64> for Lsn {
    fn add_assign(&mut self, bytes: u64) {
        self.0 += bytes;
    }
}

/// As PostgreSQL writes it: `X/Y`, the high and the low 32 bits in upper-case hex.
impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xFFFF_FFFF)
    }
}

/// Reads `X/Y` as PostgreSQL's `pg_lsn` does: one to eight hex digits on each side of the slash,
/// in either case; white space around the whole is ignored.
impl FromStr for Lsn {
    type Err = Error;

    fn from_str(text: &str) -> Result<Lsn, Error> {
        let half = |h: &str| (!h.is_empty() && h.len() <= 8 && h.bytes().all(|b| b.is_ascii_hexdigit())).then(|| u32::from_str_radix(h, 16).ok()).flatten();
        text.trim()
            .split_once('/')
            .and_then(|(hi, lo)| Some(Lsn((u64::from(half(hi)?) << 32) | u64::from(half(lo)?))))
            .ok_or_else(|| Error::invalid(format!("'{text}' is not an LSN: write it as PostgreSQL does, X/Y (two hex numbers of up to 8 digits, e.g. 0/3000060)")))
    }
}

/// As its text, `X/Y`: the string JSON has always held.
impl Serialize for Lsn {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// From its text, `X/Y`; anything else is refused.
impl<'de> Deserialize<'de> for Lsn {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Lsn, D::Error> {
        String::deserialize(deserializer)?.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_as_postgres_writes_it() {
        assert_eq!(Lsn(0x1_0000_00A0).to_string(), "1/A0");
        assert_eq!("1/A0".parse::<Lsn>().unwrap(), Lsn(0x1_0000_00A0));
        assert_eq!(Lsn(0x16B3748).to_string(), "0/16B3748");
        assert_eq!(Lsn(0x1A_0000_0000).to_string(), "1A/0");
        assert_eq!(Lsn(0).to_string(), "0/0");
        assert_eq!(Lsn(u64::MAX).to_string(), "FFFFFFFF/FFFFFFFF");
        assert_eq!("16/b374d848".parse::<Lsn>().unwrap(), Lsn(0x16_B374_D848), "lower case reads");
        assert_eq!(" 0/3000060\n".parse::<Lsn>().unwrap(), Lsn(0x300_0060), "white space around it");
        for l in [0, 1, 0x300_0060, 0xFFFF_FFFF, 0x1_0000_0000, 0x16_B374_D848, u64::MAX] {
            assert_eq!(Lsn(l).to_string().parse::<Lsn>().unwrap(), Lsn(l));
        }
    }

    #[test]
    fn bad_text_is_refused() {
        for bad in ["", "nope", "0", "/0", "0/", "1/2/3", "0x1/0", "+1/0", "1/-0", "g/0", "1 /0", "123456789/0", "0/123456789"] {
            let e = bad.parse::<Lsn>().unwrap_err();
            assert_eq!(e.kind(), sheaf_core::ErrorKind::InvalidInput, "{bad}");
            assert!(e.to_string().contains("X/Y"), "{bad}: {e}");
        }
        assert!(serde_json::from_str::<Lsn>(r#""0/zz""#).is_err());
        assert!(serde_json::from_str::<Lsn>("16").is_err(), "a number is not an LSN's JSON");
    }

    #[test]
    fn json_holds_the_text() {
        assert_eq!(serde_json::to_string(&Lsn(0x1_0000_00A0)).unwrap(), r#""1/A0""#);
        assert_eq!(serde_json::from_str::<Lsn>(r#""1/A0""#).unwrap(), Lsn(0x1_0000_00A0));
        let some: Option<Lsn> = serde_json::from_str(r#""0/2000028""#).unwrap();
        assert_eq!(some, Some(Lsn(0x200_0028)));
        assert_eq!(serde_json::to_string(&None::<Lsn>).unwrap(), "null");
    }

    #[test]
    fn segments_and_bytes() {
        let seg = 16 << 20;
        let l = Lsn(0x1_0300_0028);
        assert_eq!(l.segment_number(seg), 0x103);
        assert_eq!(l.segment_offset(seg), 0x28);
        assert_eq!(l.segment_start(seg), Lsn(0x1_0300_0000));
        assert_eq!(Lsn::at_segment(0x103, seg), Lsn(0x1_0300_0000));
        assert_eq!(l.saturating_sub(0x28), Lsn(0x1_0300_0000));
        assert_eq!(Lsn(3).saturating_sub(5), Lsn(0));
        assert_eq!(l.bytes_since(Lsn(0x1_0300_0000)), 0x28);
        assert_eq!(Lsn(0x1_0300_0000).bytes_since(l), 0);
        let mut m = l;
        m += 8;
        assert_eq!(m, Lsn(0x1_0300_0030));
        assert!(Lsn(0xFFFF_FFFF) < Lsn(0x1_0000_0000), "ordered as positions");
    }
}
