//! The source made ready before the first run: a directory checked, files generated, or a
//! throwaway cluster built and loaded with TPC-H (and pgBackRest's home beside it).

use sheaf_core::{Error, ErrorKind, Result};
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
}

pub(super) fn prepare_source(opts: &BenchOptions, backrest: bool, work_name: &str, note: &dyn Fn(Event)) -> Result<(Prepared, Option<WorkDir>)> {
    match &opts.source {
        Source::Path(p) => {
            if !p.is_dir() {
                return Err(Error::new(ErrorKind::Source, format!("{} is not a directory: give a directory, a postgres:// URL or --dataset tpch:SCALE", p.display())));
            }
            Ok((Prepared { arg: p.display().to_string(), cluster: None, url: None }, None))
        }
        Source::Url(u) => Ok((Prepared { arg: u.clone(), cluster: None, url: Some(u.clone()) }, None)),
        Source::Files { count, size } => {
            // Beside the first directory target (the disk being measured), else in the temporary folder.
            let parent = opts.matrix.target.iter().find_map(|t| t.dirs().first().cloned()).unwrap_or_else(std::env::temp_dir);
            let dir = WorkDir::create(&parent, &format!("{work_name}-files"))?;
            note(Event::Note(&format!("generating {count} files of {} in {}", sheaf_core::size::format_size(*size), dir.0.display())));
            sheaf_core::datagen::make_small_files(&dir.0, *count, *size, 0.6, 1)
                .map_err(|e| Error::io(ErrorKind::Target, format!("cannot generate files in {}", dir.0.display()), e))?;
            Ok((Prepared { arg: dir.0.display().to_string(), cluster: None, url: None }, Some(dir)))
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
            Ok((Prepared { arg: url.clone(), cluster: Some(cluster), url: Some(url) }, home))
        }
    }
}
