//! The source made ready before the first run: a directory checked, files generated, or a
//! throwaway cluster built and loaded with TPC-H (and pgBackRest's home beside it).

use sheaf_core::{Error, ErrorKind, Result};
use sheaf_mariadb::scratch::Scratch;
use sheaf_pg::drill::scratch::{self, ScratchCluster};

use super::event::Event;
use super::options::BenchOptions;
use super::work::{set_mode, WorkDir};
use crate::source::Source;

/// The prepared source: what children are pointed at, and the cluster when we made one.
pub(super) struct Prepared {
    pub(super) arg: String,
    pub(super) cluster: Option<ScratchCluster>,
    pub(super) url: Option<String>,
    /// A MariaDB source: where it is (for mariadb-backup), and the server when we made one (kept
    /// to the end: dropped, it is shut down).
    pub(super) mariadb: Option<sheaf_mariadb::url::Address>,
    pub(super) _mariadb_server: Option<Scratch>,
}

pub(super) fn prepare_source(opts: &BenchOptions, backrest: bool, work_name: &str, note: &dyn Fn(Event)) -> Result<(Prepared, Option<WorkDir>)> {
    match &opts.source {
        Source::Path(p) => {
            if !p.is_dir() {
                return Err(Error::new(ErrorKind::Source, format!("{} is not a directory: give a directory, a postgres:// URL or --dataset tpch:SCALE", p.display())));
            }
            Ok((Prepared { arg: p.display().to_string(), cluster: None, url: None, mariadb: None, _mariadb_server: None }, None))
        }
        Source::Url(u) => Ok((Prepared { arg: u.clone(), cluster: None, url: Some(u.clone()), mariadb: None, _mariadb_server: None }, None)),
        Source::Files { count, size } => {
            // Beside the first directory target (the disk being measured), else in the temporary folder.
            let parent = opts.matrix.target.iter().find_map(|t| t.dirs().first().cloned()).unwrap_or_else(std::env::temp_dir);
            let dir = WorkDir::create(&parent, &format!("{work_name}-files"))?;
            note(Event::Note(&format!("generating {count} files of {} in {}", sheaf_core::size::format_size(*size), dir.0.display())));
            sheaf_core::datagen::make_small_files(&dir.0, *count, *size, 0.6, 1)
                .map_err(|e| Error::io(ErrorKind::Target, format!("cannot generate files in {}", dir.0.display()), e))?;
            Ok((Prepared { arg: dir.0.display().to_string(), cluster: None, url: None, mariadb: None, _mariadb_server: None }, Some(dir)))
        }
        Source::MariaDb(u) => {
            let address = sheaf_mariadb::url::Address::parse(u, |k| std::env::var(k).ok())?;
            Ok((Prepared { arg: u.clone(), cluster: None, url: None, mariadb: Some(address), _mariadb_server: None }, None))
        }
        Source::Sysbench { tables, rows } => {
            note(Event::Note("starting a throwaway MariaDB server (Debian's mariadb-server)"));
            // A buffer pool smaller than the data, so that backups read the disk as a real
            // server's would; a redo log that a backup under no load never fills.
            let mut server = Scratch::create(&["--innodb-buffer-pool-size=256M", "--innodb-log-file-size=512M", "--innodb-io-capacity=10000", "--innodb-max-dirty-pages-pct=0"])?;
            // Asked to stop, the server stops at once: the load or query on it fails, and the
            // bench unwinds (dropping the server removes it).
            server.stop_with(&opts.stop);
            note(Event::Note(&format!("server in {} on socket {}", server.data.display(), server.socket().display())));
            server.sql("CREATE DATABASE sbtest")?;
            note(Event::Note(&format!("loading sysbench {tables} tables x {rows} rows (oltp_read_write prepare)")));
            let out = std::process::Command::new("sysbench")
                .args(["oltp_read_write", "--db-driver=mysql", "--mysql-user=root", "--mysql-db=sbtest", "--threads=2"])
                .arg(format!("--mysql-socket={}", server.socket().display()))
                .arg(format!("--tables={tables}"))
                .arg(format!("--table-size={rows}"))
                .arg("prepare")
                .output()
                .map_err(|e| Error::new(ErrorKind::Source, format!("cannot run sysbench (Debian's sysbench package): {e}")))?;
            if !out.status.success() {
                return Err(Error::new(ErrorKind::Source, format!("sysbench prepare failed: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))));
            }
            // Every page on disk, so that every run reads the same bytes.
            let dirty = || {
                server
                    .sql("SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'INNODB_BUFFER_POOL_PAGES_DIRTY'")
                    .map(|v| v.parse::<u64>().unwrap_or(u64::MAX))
            };
            for _ in 0..1200 {
                opts.stop.check()?;
                if dirty()? < 16 {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(250));
            }
            let url = server.url();
            let address = sheaf_mariadb::url::Address::parse(&url, |_| None)?;
            Ok((Prepared { arg: url, cluster: None, url: None, mariadb: Some(address), _mariadb_server: Some(server) }, None))
        }
        Source::Tpch(scale) => {
            note(Event::Note("starting a throwaway PostgreSQL cluster (installing Debian's postgresql if missing)"));
            // pgBackRest needs the WAL archived through it, and incrementals through sheaf's
            // wal-push; archiving stays off otherwise. During the load the archiver discards (only
            // WAL from each backup's start matters); they take over once the data is in.
            let archiving = backrest || opts.incremental.is_some();
            let settings: &[&str] = if archiving { &["archive_mode = on", "archive_command = 'true'"] } else { &[] };
            let mut cluster = ScratchCluster::create(None, &[], settings)?;
            // Asked to stop, the server stops at once: a load or query on it fails, and the bench
            // unwinds (dropping the cluster removes it).
            cluster.stop_with(&opts.stop);
            note(Event::Note(&format!("cluster in {} on port {}", cluster.data.display(), cluster.port)));
            cluster.query("postgres", "CREATE DATABASE tpch")?;
            note(Event::Note(&format!("loading TPC-H scale {scale} (tpchgen)")));
            crate::tpch::load(&cluster.url("tpch"), *scale, &|t| note(Event::Note(&format!("  {t}"))))?;
            // Settle the pages (hint bits, visibility map) so that every run reads the same bytes.
            cluster.query("tpch", "VACUUM ANALYZE")?;
            cluster.query("postgres", "CHECKPOINT")?;
            // pgBackRest's config, logs and locks.
            let home = if backrest {
                let dir = WorkDir::create(&std::env::temp_dir(), &format!("{work_name}-pgbackrest"))?;
                scratch::server_dir(&dir.0)?;
                set_mode(&dir.0, 0o755)?;
                Some(dir)
            } else {
                None
            };
            let url = cluster.url("postgres");
            Ok((Prepared { arg: url.clone(), cluster: Some(cluster), url: Some(url), mariadb: None, _mariadb_server: None }, home))
        }
    }
}
