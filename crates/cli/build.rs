//! What `sheaf version --verbose` says about the build: the commit and date it was built from
//! (SOURCE_DATE_EPOCH wins, for reproducible packages), and the versions of the libraries that do
//! sheaf's compression and encryption, as Cargo.lock pinned them.

use std::process::Command;

fn main() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let git = |args: &[&str]| {
        Command::new("git").current_dir(&root).args(args).output().ok().filter(|o| o.status.success()).map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=SHEAF_COMMIT={commit}");
    let epoch = std::env::var("SOURCE_DATE_EPOCH").ok().and_then(|s| s.parse::<i64>().ok());
    let epoch = epoch.unwrap_or_else(|| std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64));
    println!("cargo:rustc-env=SHEAF_BUILD_EPOCH={epoch}");
    let lock = std::fs::read_to_string(root.join("Cargo.lock")).unwrap_or_default();
    let wanted = ["lz4_flex", "libdeflate-sys", "isal-sys", "zstd-sys", "ring", "rustls", "argon2"];
    let mut found = Vec::new();
    let mut name = None;
    for line in lock.lines() {
        if let Some(n) = line.strip_prefix("name = ") {
            name = Some(n.trim_matches('"').to_string());
        } else if let (Some(v), Some(n)) = (line.strip_prefix("version = "), name.take()) {
            if wanted.contains(&n.as_str()) {
                found.push(format!("{n}={}", v.trim_matches('"')));
            }
        }
    }
    println!("cargo:rustc-env=SHEAF_LIBRARIES={}", found.join(","));
    println!("cargo:rerun-if-changed=../../Cargo.lock");
    // A commit or a checkout writes the reflog (a path that is not there would rerun every build).
    if root.join(".git/logs/HEAD").exists() {
        println!("cargo:rerun-if-changed=../../.git/logs/HEAD");
    }
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
}
