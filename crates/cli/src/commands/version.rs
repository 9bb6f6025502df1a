//! `sheaf version [--verbose]`: what this sheaf is, for a bug report or an inventory.

use sheaf_core::Result;

use crate::args::VersionArgs;

/// The libraries behind each codec and the cipher, with the versions Cargo.lock pinned.
fn libraries() -> Vec<(&'static str, &'static str)> {
    env!("SHEAF_LIBRARIES").split(',').filter_map(|kv| kv.split_once('=')).collect()
}

fn library(name: &str) -> &'static str {
    libraries().into_iter().find(|(n, _)| *n == name).map_or("?", |(_, v)| v)
}

/// `sheaf version`.
///
/// # Errors
/// None today; the signature matches the other commands'.
pub fn run(args: &VersionArgs) -> Result<()> {
    let version = env!("CARGO_PKG_VERSION");
    let commit = env!("SHEAF_COMMIT");
    let built = sheaf_core::time::utc(env!("SHEAF_BUILD_EPOCH").parse().unwrap_or(0));
    let zstd = sheaf_core::codec::zstd_version();
    let codecs = [
        ("lz4", format!("lz4_flex {} (Rust)", library("lz4_flex"))),
        ("deflate", format!("ISA-L igzip (isal-sys {}) for levels 0-3; libdeflate {} for 4-12 and to decompress", library("isal-sys"), library("libdeflate-sys"))),
        ("zstd", format!("libzstd {zstd} (zstd-sys {})", library("zstd-sys"))),
    ];
    let crypto = format!("ring {} (AES-256-GCM, HKDF-SHA256, X25519); Argon2id from argon2 {}", library("ring"), library("argon2"));
    let tls = format!("rustls {} with ring's provider", library("rustls"));
    let cpu = sheaf_core::codec::cpu_features();
    if args.json {
        let v = serde_json::json!({
            "version": version,
            "commit": commit,
            "built": built,
            "target": format!("{}-{}", std::env::consts::ARCH, std::env::consts::OS),
            "codecs": codecs.iter().map(|(c, l)| serde_json::json!({"codec": c, "library": l})).collect::<Vec<_>>(),
            "crypto": crypto,
            "tls": tls,
            "cpu_features": cpu,
        });
        say!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return Ok(());
    }
    say!("sheaf {version}");
    if args.verbose {
        say!("commit:   {commit}");
        say!("built:    {built}");
        say!("target:   {}-{}", std::env::consts::ARCH, std::env::consts::OS);
        for (codec, lib) in &codecs {
            say!("{:<9} {lib}", format!("{codec}:"));
        }
        say!("crypto:   {crypto}");
        say!("tls:      {tls}");
        say!("cpu:      {}", if cpu.is_empty() { "no SIMD features detected".to_string() } else { cpu.join(" ") });
    }
    Ok(())
}
