//! The sweep: every combination of codec, stripe count, transfer size, buffer count and target.

use std::path::PathBuf;

use serde::Serialize;
use sheaf_core::size::{format_size, parse_size};
use sheaf_core::{CodecSpec, Error, Result};

/// Where a run writes its stripes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BenchTarget {
    /// Discard (read + compress only).
    Nul,
    /// Stripe files in these directories, dealt round-robin (`/mnt/a+/mnt/b`: stripes on two
    /// volumes).
    Dir(Vec<PathBuf>),
    /// Stripe objects under this prefix (`s3://BUCKET/PREFIX`), reached as the environment says
    /// (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...).
    S3(String),
}

impl BenchTarget {
    /// Parse one `--target` item: `nul`, `DIR`, `DIR+DIR...` or `s3://BUCKET[/PREFIX]`.
    ///
    /// # Errors
    /// An empty directory in a `+` list, an `s3://` without a bucket.
    pub fn parse(text: &str) -> Result<BenchTarget> {
        if text.eq_ignore_ascii_case("nul") {
            return Ok(BenchTarget::Nul);
        }
        if let Some(rest) = text.strip_prefix("s3://") {
            let rest = rest.trim_end_matches('/');
            if rest.is_empty() || rest.starts_with('/') {
                return Err(Error::invalid(format!("--target: '{text}' has no bucket: give s3://BUCKET or s3://BUCKET/PREFIX")));
            }
            return Ok(BenchTarget::S3(format!("s3://{rest}")));
        }
        let dirs: Vec<PathBuf> = text.split('+').map(|d| PathBuf::from(d.trim())).collect();
        if dirs.iter().any(|d| d.as_os_str().is_empty()) {
            return Err(Error::invalid(format!("--target: '{text}' has an empty directory: give nul, DIR or DIR+DIR")));
        }
        Ok(BenchTarget::Dir(dirs))
    }

    /// Where stripe `k` (from 0) goes: a file in its directory's work folder, or an object under
    /// the prefix's; `None` for nul.
    pub fn stripe_location(&self, work: &str, k: usize) -> Option<String> {
        match self {
            BenchTarget::Nul => None,
            BenchTarget::Dir(dirs) => Some(dirs[k % dirs.len()].join(work).join(format!("bench_{}.sheaf", k + 1)).display().to_string()),
            BenchTarget::S3(prefix) => Some(format!("{prefix}/{work}/bench_{}.sheaf", k + 1)),
        }
    }

    /// Directories it writes into (none for nul and object storage).
    pub fn dirs(&self) -> &[PathBuf] {
        match self {
            BenchTarget::Dir(d) => d,
            _ => &[],
        }
    }
}

impl std::fmt::Display for BenchTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BenchTarget::Nul => f.write_str("nul"),
            BenchTarget::S3(prefix) => f.write_str(prefix),
            BenchTarget::Dir(dirs) => {
                let shown: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
                f.write_str(&shown.join("+"))
            }
        }
    }
}

/// The lists to combine.
#[derive(Clone, Debug, PartialEq)]
pub struct Matrix {
    /// Codecs.
    pub compression: Vec<CodecSpec>,
    /// Stripe counts.
    pub stripes: Vec<usize>,
    /// Transfer sizes.
    pub transfer_size: Vec<u64>,
    /// Buffer counts (`None`: sheaf's default).
    pub buffer_count: Vec<Option<usize>>,
    /// Targets.
    pub target: Vec<BenchTarget>,
    /// Runs per permutation.
    pub repeat: usize,
}

/// One combination.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Permutation {
    /// Codec spec, e.g. `zstd:low`.
    pub compression: String,
    /// Stripes.
    pub stripes: usize,
    /// Transfer size in bytes.
    pub transfer_size: u64,
    /// Buffer count, or `None` for the default.
    pub buffer_count: Option<usize>,
    /// Target.
    pub target: BenchTarget,
}

impl Permutation {
    /// A short name for progress lines: `zstd:low ×2 1 MiB buf=default → nul`.
    pub fn name(&self) -> String {
        format!(
            "{} x{} {} buf={} -> {}",
            self.compression,
            self.stripes,
            format_size(self.transfer_size),
            self.buffer_count.map_or_else(|| "default".to_string(), |b| b.to_string()),
            self.target
        )
    }
}

/// The items of a comma-separated list, each once, in order.
fn list<'a>(flag: &str, text: &'a str) -> Result<Vec<&'a str>> {
    let mut items: Vec<&str> = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if !items.contains(&item) {
            items.push(item);
        }
    }
    if items.is_empty() {
        return Err(Error::invalid(format!("--{flag} is empty: give a comma-separated list")));
    }
    Ok(items)
}

impl Matrix {
    /// Parse the flags' comma-separated lists.
    ///
    /// # Errors
    /// [`sheaf_core::ErrorKind::InvalidInput`] naming the flag and the item at fault.
    pub fn from_flags(compression: &str, stripes: &str, transfer_size: &str, buffer_count: &str, target: &str, repeat: usize) -> Result<Matrix> {
        let compression = list("compression", compression)?.into_iter().map(CodecSpec::parse).collect::<Result<Vec<_>>>()?;
        let stripes = list("stripes", stripes)?
            .into_iter()
            .map(|s| match s.parse::<usize>() {
                Ok(n @ 1..=64) => Ok(n),
                _ => Err(Error::invalid(format!("--stripes: '{s}' is not a stripe count from 1 to 64"))),
            })
            .collect::<Result<Vec<_>>>()?;
        use sheaf_core::format::{MAX_TRANSFER_SIZE, MIN_TRANSFER_SIZE};
        let transfer_size = list("transfer-size", transfer_size)?
            .into_iter()
            .map(|t| match parse_size(t)? {
                n @ MIN_TRANSFER_SIZE..=MAX_TRANSFER_SIZE => Ok(n),
                _ => Err(Error::invalid(format!("--transfer-size: '{t}' is out of range: give {} to {}", format_size(MIN_TRANSFER_SIZE), format_size(MAX_TRANSFER_SIZE)))),
            })
            .collect::<Result<Vec<_>>>()?;
        let buffer_count = list("buffer-count", buffer_count)?
            .into_iter()
            .map(|s| match s {
                "default" | "auto" => Ok(None),
                _ => s
                    .parse::<usize>()
                    .ok()
                    .filter(|&n| n >= 2)
                    .map(Some)
                    .ok_or_else(|| Error::invalid(format!("--buffer-count: '{s}' is not a buffer count (2 or more, or 'default')"))),
            })
            .collect::<Result<Vec<_>>>()?;
        let target = list("target", target)?.into_iter().map(BenchTarget::parse).collect::<Result<Vec<_>>>()?;
        if repeat == 0 {
            return Err(Error::invalid("--repeat 0: each permutation needs at least one run"));
        }
        Ok(Matrix { compression, stripes, transfer_size, buffer_count, target, repeat })
    }

    /// Every combination, targets outermost and codecs innermost, so that a table reads like the
    /// seeds' (codecs side by side for each setting).
    pub fn permutations(&self) -> Vec<Permutation> {
        let mut out = Vec::new();
        for t in &self.target {
            for &s in &self.stripes {
                for &ts in &self.transfer_size {
                    for &b in &self.buffer_count {
                        for c in &self.compression {
                            out.push(Permutation { compression: c.to_string(), stripes: s, transfer_size: ts, buffer_count: b, target: t.clone() });
                        }
                    }
                }
            }
        }
        out
    }

    /// Runs in all: permutations × repeat.
    pub fn runs(&self) -> usize {
        self.permutations().len() * self.repeat
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_every_combination_in_a_stable_order() {
        let m = Matrix::from_flags("lz4,zstd:low", "1,2", "64KiB,1MiB", "7,default", "nul,/tmp/b", 3).unwrap();
        let p = m.permutations();
        assert_eq!(p.len(), 2 * 2 * 2 * 2 * 2);
        assert_eq!(m.runs(), 96);
        assert_eq!(p[0], Permutation { compression: "lz4".into(), stripes: 1, transfer_size: 65536, buffer_count: Some(7), target: BenchTarget::Nul });
        assert_eq!(p[1].compression, "zstd:low", "codecs innermost");
        assert_eq!(p[2].buffer_count, None);
        assert_eq!(p.last().unwrap().target.to_string(), "/tmp/b", "targets outermost");
        assert_eq!(p[0].name(), "lz4 x1 64 KiB buf=7 -> nul");
    }

    #[test]
    fn repeated_items_count_once() {
        let m = Matrix::from_flags("lz4,zstd:low,lz4", "1,1", "1MiB", "default", "nul,nul", 2).unwrap();
        assert_eq!(m.permutations().len(), 2);
    }

    #[test]
    fn stripes_are_dealt_over_the_directories_of_a_target() {
        let t = BenchTarget::parse("/mnt/a+/mnt/b").unwrap();
        assert_eq!(t.to_string(), "/mnt/a+/mnt/b");
        assert_eq!(t.stripe_location("w", 0).unwrap(), "/mnt/a/w/bench_1.sheaf");
        assert_eq!(t.stripe_location("w", 1).unwrap(), "/mnt/b/w/bench_2.sheaf");
        assert_eq!(t.stripe_location("w", 2).unwrap(), "/mnt/a/w/bench_3.sheaf");
        let s3 = BenchTarget::parse("s3://bucket/runs/").unwrap();
        assert_eq!(s3.to_string(), "s3://bucket/runs");
        assert_eq!(s3.stripe_location("w", 1).unwrap(), "s3://bucket/runs/w/bench_2.sheaf");
        assert!(s3.dirs().is_empty());
        assert!(BenchTarget::parse("s3://").is_err());
        assert_eq!(BenchTarget::parse("NUL").unwrap(), BenchTarget::Nul);
        assert_eq!(BenchTarget::Nul.stripe_location("w", 0), None);
        assert!(BenchTarget::parse("/mnt/a+").unwrap_err().to_string().contains("empty directory"));
    }

    #[test]
    fn bad_items_are_named() {
        for (args, needle) in [
            (("brotli", "1", "1MiB", "7", "nul"), "unknown compression"),
            (("lz4", "0", "1MiB", "7", "nul"), "'0' is not a stripe count"),
            (("lz4", "1", "big", "7", "nul"), "not a size"),
            (("lz4", "1", "32MiB", "7", "nul"), "'32MiB' is out of range: give 64 KiB to 16 MiB"),
            (("lz4", "1", "1MiB", "1", "nul"), "'1' is not a buffer count"),
            (("lz4", "", "1MiB", "7", "nul"), "--stripes is empty"),
        ] {
            let e = Matrix::from_flags(args.0, args.1, args.2, args.3, args.4, 1).unwrap_err();
            assert!(e.to_string().contains(needle), "{e}");
        }
        assert!(Matrix::from_flags("lz4", "1", "1MiB", "7", "nul", 0).is_err());
    }
}
