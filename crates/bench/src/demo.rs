//! `sheaf demo`: a throwaway cluster loaded with TPC-H, backed up with each codec to two stripes,
//! each backup restored to a new directory, started, and checked row for row against the source.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use sheaf_core::stop::Stop;
use sheaf_core::{BackupOptions, BackupSet, CodecSpec, Error, ErrorKind, LocalOnly, Location, NoProgress, Result};

use sheaf_pg::drill::scratch::ScratchCluster;
use sheaf_pg::{backup_postgres, restore_postgres, PgBackupOptions, PgRestoreOptions};

use crate::tpch;

/// What to run.
#[derive(Clone, Debug)]
pub struct DemoOptions {
    /// TPC-H scale factor (1 ≈ 1 GB).
    pub scale: f64,
    /// Codecs to try.
    pub codecs: Vec<CodecSpec>,
    /// Stripes per backup.
    pub stripes: usize,
    /// Asked (Ctrl-C, SIGTERM), the demo stops: its servers stop at once, the backup or restore
    /// under way stops, and the demo unwinds, removing its cluster and folders.
    pub stop: Stop,
}

impl Default for DemoOptions {
    fn default() -> Self {
        let codecs = ["lz4", "deflate:1", "zstd:low", "zstd:medium", "zstd:high"].iter().map(|c| CodecSpec::parse(c).expect("known codec")).collect();
        DemoOptions { scale: 0.1, codecs, stripes: 2, stop: Stop::new() }
    }
}

/// One codec's results.
#[derive(Clone, Debug, serde::Serialize)]
pub struct DemoRow {
    /// Codec spec.
    pub codec: String,
    /// Backup wall time.
    pub backup_seconds: f64,
    /// Backup CPU: (user + system) / (wall × cores), in percent.
    pub backup_cpu_pct: f64,
    /// Bytes read from the cluster.
    pub bytes_read: u64,
    /// Bytes of all stripes.
    pub size_bytes: u64,
    /// bytes_read / size_bytes.
    pub ratio: f64,
    /// Restore wall time.
    pub restore_seconds: f64,
    /// Restore CPU in percent, as above.
    pub restore_cpu_pct: f64,
    /// Every table's row count in the restored, started cluster equals the source's.
    pub rows_match: bool,
}

/// User + system CPU seconds of this process so far.
fn cpu_seconds() -> f64 {
    let (user, system, _) = sheaf_core::host::process_usage();
    user + system
}

/// Run `f`, returning its result, wall seconds and CPU percent of all cores.
pub fn measured<T>(f: impl FnOnce() -> Result<T>) -> Result<(T, f64, f64)> {
    let (c0, t0) = (cpu_seconds(), Instant::now());
    let v = f()?;
    let wall = t0.elapsed().as_secs_f64();
    let cores = sheaf_core::host::available_cores() as f64;
    Ok((v, wall, 100.0 * (cpu_seconds() - c0) / (wall * cores).max(1e-9)))
}

/// Run the demo; `note` hears what is happening.
///
/// # Errors
/// PostgreSQL missing and not installable, loading, backup or restore failing, or a restored
/// cluster that does not start; [`ErrorKind::Cancelled`] once `opts.stop` was asked.
pub fn run(opts: &DemoOptions, note: &dyn Fn(&str)) -> Result<Vec<DemoRow>> {
    note("starting a throwaway PostgreSQL cluster (installing Debian's postgresql if missing)");
    let mut source = ScratchCluster::create(None, &[], &[])?;
    source.stop_with(&opts.stop);
    note(&format!("cluster in {} on port {}", source.data.display(), source.port));
    source.query("postgres", "CREATE DATABASE tpch")?;
    note(&format!("loading TPC-H scale {} with tpchgen", opts.scale));
    let (expected, load_s, _) = measured(|| tpch::load(&source.url("tpch"), opts.scale, &|t| note(&format!("  {t}"))))?;
    let total: i64 = expected.iter().map(|c| c.1).sum();
    note(&format!("loaded {total} rows in {load_s:.1} s"));
    let work = source.base.path();
    let mut rows = Vec::new();
    for (i, codec) in opts.codecs.iter().enumerate() {
        opts.stop.check()?;
        note(&format!("{codec}: backup to {} stripes, restore, start, count rows", opts.stripes));
        let dir = work.join(format!("run{i}"));
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(ErrorKind::Target, format!("cannot create {}", dir.display()), e))?;
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).map_err(|e| Error::io(ErrorKind::Target, "chmod", e))?;
        let stripes: Vec<_> = (1..=opts.stripes).map(|k| dir.join(format!("tpch_{k}.sheaf"))).collect();
        let mut bo = BackupOptions::new(stripes.iter().map(Location::file).collect());
        bo.codec = *codec;
        bo.label = Some(format!("sheaf demo {codec}"));
        bo.stop = opts.stop.clone();
        let pg = PgBackupOptions { url: source.url("postgres"), ..Default::default() };
        let (b, backup_s, backup_cpu) = measured(|| backup_postgres(&pg, &bo, Arc::new(NoProgress)))?;
        let restored = dir.join("data");
        let mut ro = PgRestoreOptions::new(&restored);
        ro.core.stop = opts.stop.clone();
        let (_, restore_s, restore_cpu) = measured(|| restore_postgres(&BackupSet::open(&[Location::file(&stripes[0])], &LocalOnly)?, &ro, Arc::new(NoProgress)))?;
        let rows_match = {
            let mut copy = ScratchCluster::over(&restored, &source.sock)?;
            copy.stop_with(&opts.stop);
            let got = tpch::counts(&copy.url("tpch"))?;
            got == expected
        };
        rows.push(DemoRow {
            codec: codec.to_string(),
            backup_seconds: backup_s,
            backup_cpu_pct: backup_cpu,
            bytes_read: b.report.bytes_read,
            size_bytes: b.report.bytes_written,
            ratio: b.report.ratio(),
            restore_seconds: restore_s,
            restore_cpu_pct: restore_cpu,
            rows_match,
        });
        remove(&dir);
    }
    opts.stop.check()?;
    Ok(rows)
}

fn remove(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
}
