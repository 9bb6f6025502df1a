//! Codecs behind one factory. Callers parse a [`CodecSpec`] from text such as `zstd:high` and ask
//! [`CodecSpec::compressor`] / [`decompressor`] for an instance; no caller names a concrete codec.
//!
//! Every chunk is compressed on its own (no shared dictionary or window), so chunks compress in
//! parallel and a restore can decode any chunk alone.

mod deflate;
mod lz4;
mod stored;
mod zstd;

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The codec families sheaf knows. The discriminant is the on-disk codec id of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[repr(u8)]
pub enum CodecKind {
    /// Stored as is.
    None = 0,
    /// LZ4 block format (lz4_flex): the fast LZ class, like SQL Server's MS_XPRESS.
    Lz4 = 1,
    /// Raw deflate (RFC 1951): ISA-L for levels 0–3, libdeflate for 4–12. The QAT_DEFLATE format.
    Deflate = 2,
    /// Zstandard (libzstd).
    Zstd = 3,
}

impl CodecKind {
    /// The codec for an on-disk id.
    pub fn from_id(id: u8) -> Option<CodecKind> {
        Some(match id {
            0 => CodecKind::None,
            1 => CodecKind::Lz4,
            2 => CodecKind::Deflate,
            3 => CodecKind::Zstd,
            _ => return None,
        })
    }

    /// The lower-case name used on the command line and in manifests.
    pub fn name(self) -> &'static str {
        match self {
            CodecKind::None => "none",
            CodecKind::Lz4 => "lz4",
            CodecKind::Deflate => "deflate",
            CodecKind::Zstd => "zstd",
        }
    }
}

/// zstd's named levels, SQL Server 2025's LOW / MEDIUM / HIGH, chosen by measurement on PostgreSQL
/// pages (docs/codecs.md): 1 is the throughput point; 3 (zstd's own default) buys 8 % smaller output
/// for a third less speed; 7 is where the curve flattens (9 adds 0.6 % ratio for 24 % less speed).
pub const ZSTD_LOW: i32 = 1;
/// See [`ZSTD_LOW`].
pub const ZSTD_MEDIUM: i32 = 3;
/// See [`ZSTD_LOW`].
pub const ZSTD_HIGH: i32 = 7;

/// A codec and its level, parsed from `none`, `lz4`, `deflate[:0-12]`, `zstd[:low|medium|high|-7..22]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CodecSpec {
    /// The family.
    pub kind: CodecKind,
    /// The numeric level (0 for codecs without levels).
    pub level: i32,
    /// The named level if one was given (`low`, `medium`, `high`).
    pub named: Option<&'static str>,
}

impl Default for CodecSpec {
    /// `zstd:low`.
    fn default() -> Self {
        CodecSpec { kind: CodecKind::Zstd, level: ZSTD_LOW, named: Some("low") }
    }
}

const CODEC_HELP: &str = "codecs: none, lz4, deflate[:0-12] (default 1), zstd[:low|medium|high|-7..22] (default low), auto (zstd, its level steered by the pipeline)";

impl CodecSpec {
    /// Parse a codec spec.
    ///
    /// # Errors
    /// [`crate::error::ErrorKind::InvalidInput`] for an unknown codec or a level out of range, naming both
    /// the text and the accepted forms.
    pub fn parse(text: &str) -> Result<CodecSpec> {
        let lower = text.trim().to_ascii_lowercase();
        let (name, level) = match lower.split_once(':') {
            Some((n, l)) => (n, Some(l)),
            None => (lower.as_str(), None),
        };
        let bad_level = |range: &str| Error::invalid(format!("compression level '{}' is out of range for {name}: use {range}", level.unwrap_or("")));
        let numeric = |lo: i32, hi: i32, range: &str| -> Result<i32> {
            let l = level.unwrap_or_default();
            match l.parse::<i32>() {
                Ok(v) if (lo..=hi).contains(&v) => Ok(v),
                _ => Err(bad_level(range)),
            }
        };
        match name {
            "none" | "lz4" if level.is_some() => Err(Error::invalid(format!("{name} takes no level (got '{text}'); {CODEC_HELP}"))),
            "none" => Ok(CodecSpec { kind: CodecKind::None, level: 0, named: None }),
            "auto" if level.is_some() => Err(Error::invalid(format!("auto takes no level (got '{text}'): it chooses zstd levels itself; {CODEC_HELP}"))),
            "auto" => Ok(CodecSpec::auto()),
            "lz4" => Ok(CodecSpec { kind: CodecKind::Lz4, level: 0, named: None }),
            "deflate" => {
                let level = if level.is_some() { numeric(0, 12, "0..12")? } else { 1 };
                Ok(CodecSpec { kind: CodecKind::Deflate, level, named: None })
            }
            "zstd" => {
                let range = "low, medium, high or -7..22";
                let (level, named) = match level {
                    None | Some("low") => (ZSTD_LOW, Some("low")),
                    Some("medium") => (ZSTD_MEDIUM, Some("medium")),
                    Some("high") => (ZSTD_HIGH, Some("high")),
                    Some(_) => (numeric(-7, 22, range)?, None),
                };
                Ok(CodecSpec { kind: CodecKind::Zstd, level, named })
            }
            _ => Err(Error::invalid(format!("unknown compression '{text}'; {CODEC_HELP}"))),
        }
    }

    /// Bytes a pipeline buffer needs so that it can hold a chunk of `transfer_size` raw bytes or a
    /// compressor's output for one.
    pub fn buffer_len(&self, transfer_size: usize) -> usize {
        match self.kind {
            CodecKind::Lz4 => lz4::room(transfer_size),
            _ => transfer_size,
        }
    }

    /// A compressor for this spec. Each thread makes its own; instances keep their working state.
    pub fn compressor(&self) -> Result<Box<dyn Compressor>> {
        Ok(match self.kind {
            CodecKind::None => Box::new(stored::Stored),
            CodecKind::Lz4 => Box::new(lz4::Lz4),
            CodecKind::Deflate => deflate::compressor(self.level)?,
            CodecKind::Zstd => Box::new(zstd::ZstdCompressor::new(self.level)?),
        })
    }
}

impl CodecSpec {
    /// `auto`: zstd, starting at low, its level raised while the writers are the bottleneck and
    /// lowered while the compressors are (see `AutoLevel` in backup/auto.rs).
    pub fn auto() -> CodecSpec {
        CodecSpec { kind: CodecKind::Zstd, level: ZSTD_LOW, named: Some("auto") }
    }

    /// Whether this is `auto`.
    pub fn is_auto(&self) -> bool {
        self.named == Some("auto")
    }
}

impl fmt::Display for CodecSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.kind, self.named) {
            (_, Some("auto")) => f.write_str("auto"),
            (CodecKind::None | CodecKind::Lz4, _) => f.write_str(self.kind.name()),
            (_, Some(n)) => write!(f, "{}:{n}", self.kind.name()),
            (_, None) => write!(f, "{}:{}", self.kind.name(), self.level),
        }
    }
}

/// Compresses one chunk into a caller-provided buffer.
pub trait Compressor: Send {
    /// Compress `src` into `dst`, returning the compressed length, or `None` when the result would
    /// not fit in `dst` (the caller then stores the chunk raw). `dst.len()` is at most `src.len()`
    /// in practice, so "does not fit" also means "does not pay".
    ///
    /// # Errors
    /// A codec failure other than lack of room.
    fn compress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<Option<usize>>;

    /// The codec id written in frames this compressor produces.
    fn kind(&self) -> CodecKind;

    /// How much output room `compress` needs to try a chunk of `raw_len` bytes. Most codecs stop
    /// when the output would exceed the input; lz4_flex wants its worst case up front.
    fn room(&self, raw_len: usize) -> usize {
        raw_len
    }

    /// Compress from now on at `level` (codecs without levels ignore it).
    ///
    /// # Errors
    /// A level the codec refuses.
    fn set_level(&mut self, _level: i32) -> Result<()> {
        Ok(())
    }
}

/// Decompresses one chunk of known raw length.
pub trait Decompressor: Send {
    /// Decompress `src` into `dst`, which has exactly the chunk's raw length.
    ///
    /// # Errors
    /// [`crate::error::ErrorKind::Corrupt`] when the payload does not decode to exactly `dst.len()` bytes.
    fn decompress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<()>;
}

/// The version of the zstd library linked in, as it reports itself (`1.5.7`).
pub fn zstd_version() -> &'static str {
    ::zstd::zstd_safe::version_string()
}

/// The CPU features the codecs and the cipher pick their fastest paths by, that this CPU has.
pub fn cpu_features() -> Vec<&'static str> {
    let mut on = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        for (name, has) in [
            ("sse4.2", std::arch::is_x86_feature_detected!("sse4.2")),
            ("avx2", std::arch::is_x86_feature_detected!("avx2")),
            ("avx512f", std::arch::is_x86_feature_detected!("avx512f")),
            ("aes", std::arch::is_x86_feature_detected!("aes")),
            ("vaes", std::arch::is_x86_feature_detected!("vaes")),
            ("pclmulqdq", std::arch::is_x86_feature_detected!("pclmulqdq")),
        ] {
            if has {
                on.push(name);
            }
        }
    }
    on
}

/// A decompressor for frames written with `kind`.
pub fn decompressor(kind: CodecKind) -> Result<Box<dyn Decompressor>> {
    Ok(match kind {
        CodecKind::None => Box::new(stored::Stored),
        CodecKind::Lz4 => Box::new(lz4::Lz4),
        CodecKind::Deflate => Box::new(deflate::Inflater::new()),
        CodecKind::Zstd => Box::new(zstd::ZstdDecompressor::new()?),
    })
}

/// One decompressor per codec, made on first use: what a restore thread keeps.
#[derive(Default)]
pub struct DecompressorSet {
    slots: [Option<Box<dyn Decompressor>>; 4],
}

impl DecompressorSet {
    /// Decompress `src` written with `kind` into `dst`.
    ///
    /// # Errors
    /// As [`Decompressor::decompress`].
    pub fn decompress(&mut self, kind: CodecKind, src: &[u8], dst: &mut [u8]) -> Result<()> {
        let slot = &mut self.slots[kind as usize];
        if slot.is_none() {
            *slot = Some(decompressor(kind)?);
        }
        slot.as_mut().expect("slot just filled").decompress(src, dst)
    }
}

fn wrong_length(codec: &str, got: usize, want: usize) -> Error {
    Error::corrupt(format!("{codec} payload decoded to {got} bytes, expected {want}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(n: usize) -> Vec<u8> {
        // Text-like, compressible, deterministic.
        let words = [&b"lineitem "[..], b"orders ", b"1995-03-15 ", b"DELIVER IN PERSON ", b"0.04 "];
        let mut out = Vec::with_capacity(n);
        let mut x: u32 = 12345;
        while out.len() < n {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            out.extend_from_slice(words[(x % 5) as usize]);
            out.push((x >> 8) as u8);
        }
        out.truncate(n);
        out
    }

    #[test]
    fn parse_named_and_numeric() {
        assert_eq!(CodecSpec::parse("zstd").unwrap().level, ZSTD_LOW);
        assert_eq!(CodecSpec::parse("ZSTD:HIGH").unwrap().level, ZSTD_HIGH);
        assert_eq!(CodecSpec::parse("zstd:medium").unwrap().to_string(), "zstd:medium");
        assert_eq!(CodecSpec::parse("zstd:-7").unwrap().level, -7);
        assert_eq!(CodecSpec::parse("zstd:22").unwrap().to_string(), "zstd:22");
        assert_eq!(CodecSpec::parse("deflate").unwrap().level, 1);
        assert_eq!(CodecSpec::parse("deflate:12").unwrap().level, 12);
        assert_eq!(CodecSpec::parse("lz4").unwrap().kind, CodecKind::Lz4);
        assert_eq!(CodecSpec::parse("none").unwrap().to_string(), "none");
        assert_eq!(CodecSpec::default().to_string(), "zstd:low");
        let auto = CodecSpec::parse("AUTO").unwrap();
        assert!(auto.is_auto() && auto.kind == CodecKind::Zstd && auto.level == ZSTD_LOW);
        assert_eq!(auto.to_string(), "auto");
        assert!(CodecSpec::parse("auto:3").unwrap_err().to_string().contains("auto takes no level"));
    }

    #[test]
    fn parse_rejects_with_help() {
        for (t, needle) in [
            ("brotli", "unknown compression"),
            ("zstd:23", "-7..22"),
            ("zstd:-8", "-7..22"),
            ("zstd:ultra", "-7..22"),
            ("deflate:13", "0..12"),
            ("deflate:x", "0..12"),
            ("lz4:3", "takes no level"),
        ] {
            let e = CodecSpec::parse(t).unwrap_err();
            assert_eq!(e.kind(), crate::error::ErrorKind::InvalidInput);
            assert!(e.to_string().contains(needle), "{t}: {e}");
        }
    }

    #[test]
    fn every_codec_and_level_round_trips() {
        let data = sample(300_000);
        let mut specs: Vec<String> = vec!["none".into(), "lz4".into()];
        specs.extend((0..=12).map(|l| format!("deflate:{l}")));
        specs.extend((-7..=12).map(|l| format!("zstd:{l}")));
        for s in specs {
            let spec = CodecSpec::parse(&s).unwrap();
            let mut c = spec.compressor().unwrap();
            let mut out = vec![0u8; spec.buffer_len(data.len())];
            let room = c.room(data.len());
            let n = c.compress(&data, &mut out[..room]).unwrap();
            let (kind, payload) = match n {
                Some(n) => (c.kind(), &out[..n]),
                None => (CodecKind::None, &data[..]),
            };
            if spec.kind != CodecKind::None {
                assert!(n.is_some() && n.unwrap() < data.len() / 2, "{s} should compress text well");
            }
            let mut back = vec![0u8; data.len()];
            decompressor(kind).unwrap().decompress(payload, &mut back).unwrap();
            assert!(back == data, "{s} round trip differs");
        }
    }

    #[test]
    fn incompressible_reports_no_room() {
        let mut x: u64 = 7;
        let data: Vec<u8> = (0..100_000)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (x >> 56) as u8
            })
            .collect();
        for s in ["lz4", "deflate:1", "deflate:9", "zstd:low"] {
            let spec = CodecSpec::parse(s).unwrap();
            let mut c = spec.compressor().unwrap();
            let mut out = vec![0u8; spec.buffer_len(data.len())];
            let room = c.room(data.len());
            assert_eq!(c.compress(&data, &mut out[..room]).unwrap(), None, "{s}");
        }
    }

    #[test]
    fn corrupt_payload_is_an_error_not_a_panic() {
        let data = sample(100_000);
        for s in ["lz4", "deflate:1", "deflate:6", "zstd:3"] {
            let spec = CodecSpec::parse(s).unwrap();
            let mut out = vec![0u8; spec.buffer_len(data.len())];
            let mut c = spec.compressor().unwrap();
            let room = c.room(data.len());
            let n = c.compress(&data, &mut out[..room]).unwrap().unwrap();
            let mut bad = out[..n].to_vec();
            bad.truncate(n / 2);
            let mut back = vec![0u8; data.len()];
            let e = decompressor(spec.kind).unwrap().decompress(&bad, &mut back).unwrap_err();
            assert_eq!(e.kind(), crate::error::ErrorKind::Corrupt, "{s}: {e}");
        }
    }
}
