//! The peers sheaf is measured against in the same run: pg_basebackup (server-side and client-side
//! compression, tar format) and pgBackRest for PostgreSQL sources, tar piped through the codec's
//! own command-line tool for directory sources; each given the settings that match a sheaf codec.

use std::path::{Path, PathBuf};
use std::process::Command;

use sheaf_core::codec::CodecKind;
use sheaf_core::{CodecSpec, Error, Result};

/// A peer tool as `--peers` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    /// pg_basebackup, measured with server-side and with client-side compression.
    PgBasebackup,
    /// pgBackRest, on a repository it archives WAL into.
    PgBackRest,
    /// `tar -cf - | zstd` (or lz4, gzip) for directory sources, restored with `zstd -dc | tar -x`.
    Tar,
    /// mariadb-backup (mariabackup) for MariaDB sources: `--parallel --stream=mbstream` through the
    /// codec's tool, restored with `mbstream -x` and `--prepare`.
    MariaBackup,
}

impl Peer {
    /// Parse `--peers`: `pg_basebackup,pgbackrest,tar` (or `none`).
    ///
    /// # Errors
    /// An unknown name.
    pub fn parse_list(text: &str) -> Result<Vec<Peer>> {
        let mut out = Vec::new();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let p = match item.to_ascii_lowercase().as_str() {
                "none" => continue,
                "pg_basebackup" | "pgbasebackup" => Peer::PgBasebackup,
                "pgbackrest" => Peer::PgBackRest,
                "tar" => Peer::Tar,
                "mariadb-backup" | "mariabackup" => Peer::MariaBackup,
                _ => return Err(Error::invalid(format!("--peers: unknown peer '{item}': give pg_basebackup, pgbackrest, tar, mariadb-backup, or none"))),
            };
            if !out.contains(&p) {
                out.push(p);
            }
        }
        Ok(out)
    }

    /// The program to look for.
    pub fn program(self) -> String {
        match self {
            Peer::PgBasebackup => "pg_basebackup".into(),
            Peer::PgBackRest => backrest_program(),
            Peer::Tar => "tar".into(),
            Peer::MariaBackup => "mariadb-backup".into(),
        }
    }
}

/// One peer configuration, as a row of the report: a tool and the settings matching a sheaf codec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerRun {
    /// `pg_basebackup (server)`, `pg_basebackup (client)` or `pgbackrest`.
    pub tool: &'static str,
    /// The sheaf codec matched.
    pub codec: String,
    /// The peer's own options, as given to it.
    pub options: Vec<String>,
    /// For pg_basebackup: the decompressor for its tar files (`zstd -dc`...), `None` for plain tar.
    pub decompress: Option<&'static str>,
}

impl PeerRun {
    /// The options as one string, for the report (tar's: the pipe).
    pub fn settings(&self) -> String {
        if self.tool == "tar" {
            return self.options.first().map_or_else(|| "tar -cf".to_string(), |c| format!("tar -cf - | {c}"));
        }
        if self.tool == "mariadb-backup" {
            let parallel = self.options.first().map_or("", String::as_str);
            return match self.options.get(1) {
                Some(c) => format!("{parallel} --stream=mbstream | {c}"),
                None => format!("{parallel} --stream=mbstream"),
            };
        }
        self.options.join(" ")
    }
}

/// pg_basebackup's `--compress` for a codec, on `side` (`server` or `client`), and the command that
/// decompresses its tar files. deflate maps to gzip (levels 1–9), zstd keeps its level and uses
/// `workers` threads, as sheaf uses every core.
fn basebackup_compress(codec: &CodecSpec, side: &str, workers: usize) -> (String, Option<&'static str>) {
    match codec.kind {
        CodecKind::None => ("none".to_string(), None),
        CodecKind::Lz4 => (format!("{side}-lz4"), Some("lz4 -dc")),
        CodecKind::Deflate => (format!("{side}-gzip:level={}", codec.level.clamp(1, 9)), Some("gzip -dc")),
        CodecKind::Zstd => (format!("{side}-zstd:level={},workers={workers}", codec.level), Some("zstd -dc")),
    }
}

/// The compressor tar's output goes through for a codec (none: plain tar), at the same level, with
/// `workers` threads where the tool has them (zstd), and the matching decompressor.
fn tar_compress(codec: &CodecSpec, workers: usize) -> (Option<String>, Option<&'static str>) {
    match codec.kind {
        CodecKind::None => (None, None),
        CodecKind::Lz4 => (Some("lz4 -1 -q".into()), Some("lz4 -dc")),
        CodecKind::Deflate => (Some(format!("gzip -{}", codec.level.clamp(1, 9))), Some("gzip -dc")),
        CodecKind::Zstd if codec.level < 0 => (Some(format!("zstd -q --fast={} -T{workers}", -codec.level)), Some("zstd -dc")),
        CodecKind::Zstd => {
            let ultra = if codec.level > 19 { " --ultra" } else { "" };
            (Some(format!("zstd -q{ultra} -{} -T{workers}", codec.level.max(1))), Some("zstd -dc"))
        }
    }
}

/// `tar -cf - -C SRC . | COMPRESS > OUT` (plain tar without a codec).
pub fn tar_backup_command(src: &Path, out: &Path, run: &PeerRun) -> Command {
    let mut c = Command::new("bash");
    let script = match run.options.first() {
        Some(comp) => format!("set -eo pipefail; tar -cf - -C \"$1\" . | {comp} > \"$2\""),
        None => "set -e; tar -cf \"$2\" -C \"$1\" .".to_string(),
    };
    c.args(["-c", &script, "bash"]).arg(src).arg(out);
    c
}

/// `DECOMPRESS < OUT | tar -xf - -C TARGET` (plain tar without a codec).
pub fn tar_restore_command(out: &Path, target: &Path, run: &PeerRun) -> Command {
    let mut c = Command::new("bash");
    let script = match run.decompress {
        Some(dec) => format!("set -eo pipefail; {dec} < \"$1\" | tar -xf - -C \"$2\""),
        None => "set -e; tar -xf \"$1\" -C \"$2\"".to_string(),
    };
    c.args(["-c", &script, "bash"]).arg(out).arg(target);
    c
}

/// `mariadb-backup --backup --parallel=N --stream=mbstream ... | COMPRESS > OUT` of the server at
/// `address` (its temporary files in `tmp`).
pub fn mariabackup_command(address: &sheaf_mariadb::url::Address, tmp: &Path, out: &Path, run: &PeerRun) -> Command {
    let mut c = Command::new("bash");
    let comp = run.options.get(1).map_or_else(|| "cat".to_string(), Clone::clone);
    let script = format!("set -eo pipefail; mariadb-backup --backup {} --stream=mbstream --target-dir=\"$1\" \"${{@:3}}\" 2>\"$1/log\" | {comp} > \"$2\"", run.options[0]);
    let mut args = vec![format!("--user={}", address.user)];
    match &address.socket {
        Some(s) => args.push(format!("--socket={s}")),
        None => args.extend([format!("--host={}", address.host), format!("--port={}", address.port)]),
    }
    c.args(["-c", &script, "bash"]).arg(tmp).arg(out).args(args);
    if let Some(p) = &address.password {
        c.env("MYSQL_PWD", p);
    }
    c
}

/// `DECOMPRESS < OUT | mbstream -x -C TARGET && mariadb-backup --prepare --target-dir=TARGET`.
pub fn mariabackup_restore_command(out: &Path, target: &Path, run: &PeerRun) -> Command {
    let mut c = Command::new("bash");
    let dec = run.decompress.unwrap_or("cat");
    let script = format!("set -eo pipefail; {dec} < \"$1\" | mbstream -x -C \"$2\" && mariadb-backup --prepare --target-dir=\"$2\" 2>\"$2.prepare.log\"");
    c.args(["-c", &script, "bash"]).arg(out).arg(target);
    c
}

/// pgBackRest's `--compress-type`/`--compress-level` for a codec.
fn backrest_compress(codec: &CodecSpec) -> Vec<String> {
    match codec.kind {
        CodecKind::None => vec!["--compress-type=none".into()],
        CodecKind::Lz4 => vec!["--compress-type=lz4".into()],
        CodecKind::Deflate => vec!["--compress-type=gz".into(), format!("--compress-level={}", codec.level.clamp(0, 9))],
        CodecKind::Zstd => vec!["--compress-type=zst".into(), format!("--compress-level={}", codec.level)],
    }
}

/// The peer runs for `codec`: pg_basebackup twice (server- and client-side; once for `none`),
/// pgBackRest once; `workers` is the parallelism each gets (sheaf's compressor threads).
pub fn runs_for(peers: &[Peer], codec: &CodecSpec, workers: usize) -> Vec<PeerRun> {
    let mut out = Vec::new();
    for p in peers {
        match p {
            Peer::PgBasebackup => {
                for (tool, side) in [("pg_basebackup (server)", "server"), ("pg_basebackup (client)", "client")] {
                    let (compress, decompress) = basebackup_compress(codec, side, workers);
                    if compress == "none" && side == "client" {
                        continue;
                    }
                    out.push(PeerRun {
                        tool: if compress == "none" { "pg_basebackup" } else { tool },
                        codec: codec.to_string(),
                        options: vec![format!("--compress={compress}")],
                        decompress,
                    });
                }
            }
            Peer::PgBackRest => {
                let mut options = backrest_compress(codec);
                options.push(format!("--process-max={workers}"));
                out.push(PeerRun { tool: "pgbackrest", codec: codec.to_string(), options, decompress: None });
            }
            Peer::Tar => {
                let (compress, decompress) = tar_compress(codec, workers);
                out.push(PeerRun { tool: "tar", codec: codec.to_string(), options: compress.into_iter().collect(), decompress });
            }
            Peer::MariaBackup => {
                let (compress, decompress) = tar_compress(codec, workers);
                let mut options = vec![format!("--parallel={workers}")];
                options.extend(compress);
                out.push(PeerRun { tool: "mariadb-backup", codec: codec.to_string(), options, decompress });
            }
        }
    }
    out
}

/// The pgBackRest measured: `SHEAF_PGBACKREST` (a path, e.g. the newest one that
/// `scripts/build-pgbackrest.sh` builds from source), else Debian's `pgbackrest` on PATH.
pub fn backrest_program() -> String {
    std::env::var("SHEAF_PGBACKREST").ok().filter(|p| !p.trim().is_empty()).unwrap_or_else(|| "pgbackrest".into())
}

/// Whether `program` is on PATH (or, for PostgreSQL's tools, in the server's bin directory).
pub fn find(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        return Path::new(program).is_file().then(|| PathBuf::from(program));
    }
    if let Some(bin) = sheaf_pg::drill::scratch::bin_dir() {
        let p = bin.join(program);
        if p.exists() {
            return Some(p);
        }
    }
    sheaf_core::host::on_path(program)
}

/// pg_basebackup of the server at `url` into `out` (tar format, WAL fetched into it, fast
/// checkpoint, fsync'd as it does by default).
pub fn basebackup_command(bin: &Path, url: &str, out: &Path, run: &PeerRun) -> Command {
    let mut c = Command::new(bin);
    c.args(["-d", url, "-D"]).arg(out).args(["-Ft", "-X", "fetch", "-c", "fast"]).args(&run.options);
    c
}

/// Extract pg_basebackup's tar files in `out` into `target` (base.tar) and `target.ts/NAME` (a
/// tablespace's NAME.tar), through the decompressor.
pub fn basebackup_restore_command(out: &Path, target: &Path, run: &PeerRun) -> Command {
    const SCRIPT: &str = r#"set -e
out=$1; target=$2; dec=$3
for f in "$out"/*.tar*; do
  n=$(basename "$f"); n=${n%%.tar*}
  case "$n" in backup_manifest) continue;; esac
  if [ "$n" = base ]; then d=$target; else d=$target.ts/$n; mkdir -p "$d"; fi
  if [ -z "$dec" ]; then tar -x -f "$f" -C "$d"; else $dec "$f" | tar -x -C "$d"; fi
done"#;
    let mut c = Command::new("sh");
    c.args(["-c", SCRIPT, "sh"]).arg(out).arg(target).arg(run.decompress.unwrap_or(""));
    c
}

/// A pgBackRest setup for one repository: its config file and stanza `bench`.
pub struct BackRest {
    /// The config file (it names the repository).
    pub config: PathBuf,
}

impl BackRest {
    /// The config for a server with data directory `pgdata`, socket directory `sock` and `port`,
    /// repository `repo`; logs and locks under `state`. WAL is pushed with lz4 so that archiving
    /// between runs stays cheap.
    pub fn config_text(pgdata: &Path, sock: &Path, port: u16, repo: &Path, state: &Path) -> String {
        format!(
            "[global]\nrepo1-path={}\nlog-path={}\nlock-path={}\nlog-level-console=warn\nlog-level-file=off\nstart-fast=y\n\
             [global:archive-push]\ncompress-type=lz4\n\
             [bench]\npg1-path={}\npg1-port={port}\npg1-socket-path={}\n",
            repo.display(),
            state.display(),
            state.display(),
            pgdata.display(),
            sock.display()
        )
    }

    /// `pgbackrest --config=... --stanza=bench ARGS`, as the server's user.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = sheaf_pg::drill::scratch::as_server_user(backrest_program());
        c.arg(format!("--config={}", self.config.display())).arg("--stanza=bench").args(args);
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codec(s: &str) -> CodecSpec {
        CodecSpec::parse(s).unwrap()
    }

    #[test]
    fn peers_parse_and_name_the_unknown() {
        assert_eq!(Peer::parse_list("pg_basebackup, pgbackrest,pg_basebackup").unwrap(), vec![Peer::PgBasebackup, Peer::PgBackRest]);
        assert_eq!(Peer::parse_list("none").unwrap(), vec![]);
        assert!(Peer::parse_list("barman").unwrap_err().to_string().contains("unknown peer 'barman'"));
        assert_eq!(Peer::parse_list("mariabackup").unwrap(), vec![Peer::MariaBackup]);
        let r = runs_for(&[Peer::MariaBackup], &codec("zstd:1"), 2);
        assert_eq!((r[0].tool, r[0].settings(), r[0].decompress), ("mariadb-backup", "--parallel=2 --stream=mbstream | zstd -q -1 -T2".to_string(), Some("zstd -dc")));
    }

    #[test]
    fn each_codec_maps_to_the_matching_peer_settings() {
        let all = [Peer::PgBasebackup, Peer::PgBackRest];
        let r = runs_for(&all, &codec("zstd:low"), 2);
        let s: Vec<(&str, String)> = r.iter().map(|r| (r.tool, r.settings())).collect();
        assert_eq!(
            s,
            vec![
                ("pg_basebackup (server)", "--compress=server-zstd:level=1,workers=2".to_string()),
                ("pg_basebackup (client)", "--compress=client-zstd:level=1,workers=2".to_string()),
                ("pgbackrest", "--compress-type=zst --compress-level=1 --process-max=2".to_string()),
            ]
        );
        assert_eq!(r[0].decompress, Some("zstd -dc"));
        let r = runs_for(&all, &codec("deflate:12"), 4);
        assert_eq!(r[0].settings(), "--compress=server-gzip:level=9");
        assert_eq!(r[2].settings(), "--compress-type=gz --compress-level=9 --process-max=4");
        let r = runs_for(&all, &codec("lz4"), 2);
        assert_eq!((r[1].settings(), r[1].decompress), ("--compress=client-lz4".to_string(), Some("lz4 -dc")));
        let r = runs_for(&all, &codec("none"), 2);
        assert_eq!(r.len(), 2, "one pg_basebackup run without compression: {r:?}");
        assert_eq!((r[0].tool, r[0].settings(), r[0].decompress), ("pg_basebackup", "--compress=none".to_string(), None));
        assert_eq!(r[1].settings(), "--compress-type=none --process-max=2");
    }

    #[test]
    fn the_tar_peer_round_trips_a_tree_through_each_codec_tool() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::create_dir_all(src.join("d")).unwrap();
        std::fs::write(src.join("d/f"), "hello tar\n").unwrap();
        let r = runs_for(&[Peer::Tar], &codec("zstd:low"), 2);
        assert_eq!((r[0].tool, r[0].settings(), r[0].decompress), ("tar", "tar -cf - | zstd -q -1 -T2".to_string(), Some("zstd -dc")));
        assert_eq!(runs_for(&[Peer::Tar], &codec("zstd:-3"), 2)[0].settings(), "tar -cf - | zstd -q --fast=3 -T2");
        assert_eq!(runs_for(&[Peer::Tar], &codec("deflate:6"), 2)[0].settings(), "tar -cf - | gzip -6");
        for c in ["none", "deflate:1", "zstd:low"] {
            let run = runs_for(&[Peer::Tar], &codec(c), 2).remove(0);
            let (out, target) = (dir.path().join(format!("{c}.tar")), dir.path().join(format!("restored-{c}")));
            std::fs::create_dir_all(&target).unwrap();
            let b = crate::measure::run(tar_backup_command(&src, &out, &run), &sheaf_core::stop::Stop::new()).unwrap();
            assert!(b.ok(), "{c}: {}", b.stderr);
            let r = crate::measure::run(tar_restore_command(&out, &target, &run), &sheaf_core::stop::Stop::new()).unwrap();
            assert!(r.ok(), "{c}: {}", r.stderr);
            assert_eq!(std::fs::read_to_string(target.join("d/f")).unwrap(), "hello tar\n", "{c}");
        }
        // A failing compressor fails the run (pipefail), not an empty archive passing for one.
        let bad = PeerRun { tool: "tar", codec: "x".into(), options: vec!["false".into()], decompress: Some("cat") };
        assert!(!crate::measure::run(tar_backup_command(&src, &dir.path().join("bad"), &bad), &sheaf_core::stop::Stop::new()).unwrap().ok());
    }

    #[test]
    fn tar_restore_extracts_base_and_tablespaces_through_the_decompressor() {
        let dir = tempfile::tempdir().unwrap();
        let (out, target) = (dir.path().join("out"), dir.path().join("restored"));
        std::fs::create_dir_all(out.join("src/ts")).unwrap();
        std::fs::create_dir_all(&target).unwrap();
        std::fs::write(out.join("src/PG_VERSION"), "15\n").unwrap();
        std::fs::write(out.join("src/ts/file"), "ts\n").unwrap();
        let sh = |cmd: &str| assert!(Command::new("sh").arg("-c").arg(cmd).current_dir(&out).status().unwrap().success(), "{cmd}");
        sh("tar -cf - -C src PG_VERSION | gzip -1 > base.tar.gz && tar -cf - -C src/ts file | gzip -1 > 16384.tar.gz && echo '{}' > backup_manifest");
        let run = runs_for(&[Peer::PgBasebackup], &codec("deflate:1"), 1).remove(0);
        let f = crate::measure::run(basebackup_restore_command(&out, &target, &run), &sheaf_core::stop::Stop::new()).unwrap();
        assert!(f.ok(), "{}", f.stderr);
        assert_eq!(std::fs::read_to_string(target.join("PG_VERSION")).unwrap(), "15\n");
        assert_eq!(std::fs::read_to_string(dir.path().join("restored.ts/16384/file")).unwrap(), "ts\n");
    }
}
