//! The end of a backup session: the pipeline drained ([`Backup::drain`]), the manifest built from
//! what was registered and read ([`Backup::manifest`], its pages from [`Backup::write_pages`]),
//! every stripe's footer written and the set published ([`publish`]), and the report
//! ([`Backup::report`]). Until the publish nothing is visible; an error on the way drops the
//! sinks unpublished, which removes them.

use std::thread;
use std::time::SystemTime;

use super::super::compress::CompressStats;
use super::super::options::BackupReport;
use super::super::write::{write_footer, WriterOut};
use super::{unix_ms, Backup};
use crate::crypto::Cipher;
use crate::error::{Error, ErrorKind, Result};
use crate::format::{BackupId, FORMAT_VERSION};
use crate::manifest::{BackupType, EntryKind, Manifest, OptionsUsed, StripeRef, Tiler};
use crate::spill::{ChunkSorter, EntrySpill, Outcome};
use crate::storage::Location;

impl Backup {
    /// Drain the pipeline, write every stripe's index, manifest and trailer, make them durable and
    /// publish them. `source` is stored in the manifest as facts about the source.
    ///
    /// # Errors
    /// The first error of any thread, or of writing footers; every stripe is then removed.
    pub fn finish(self, source: serde_json::Value) -> Result<BackupReport> {
        self.finish_with(|_| Ok(source))
    }

    /// [`Backup::finish`], letting `decide` see the findings of every [`ChunkCheck`] once all chunks
    /// are through, before anything is published: it returns the source facts for the manifest, or
    /// an error that removes every stripe.
    ///
    /// # Errors
    /// As [`Backup::finish`], or `decide`'s error.
    pub fn finish_with(mut self, decide: impl FnOnce(&[String]) -> Result<serde_json::Value>) -> Result<BackupReport> {
        let (stats, mut outs) = self.drain()?;
        self.take_kept(&mut outs)?;
        let findings = std::mem::take(&mut *self.shared.findings.lock().unwrap_or_else(|p| p.into_inner()));
        // In pages, each sealed when the set is encrypted; written once, so every stripe carries
        // the same bytes. The head follows them: it lists what changed while read.
        let cipher = self.cipher.clone();
        let mut region = crate::manifest::pages::RegionWriter::new(Vec::new(), cipher.as_deref());
        let entry_count = self.entries.len() as usize;
        let file_count = self.write_pages(&mut region, &mut outs)?;
        if !self.changed_files.is_empty() || !self.vanished_files.is_empty() {
            self.warnings.push(format!(
                "{} file{} changed and {} vanished while being read, as they do in a running database; WAL replay makes them consistent (listed in --json and the manifest)",
                self.changed_files.len(),
                if self.changed_files.len() == 1 { "" } else { "s" },
                self.vanished_files.len()
            ));
        }
        // On an error here the sinks are dropped unpublished, which removes them.
        let source = decide(&findings)?;
        let mut manifest = self.manifest(source, findings);
        if let Some(r) = manifest.resumed.as_mut() {
            r.kept_stored_bytes = outs.iter().map(|o| o.kept_bytes).sum();
        }
        let stored = region.finish(&manifest)?;
        if let Some(r) = &self.recorder {
            // From here the set's index and manifest are sealed: no attempt may follow this one.
            r.footers()?;
        }
        let remap = &self.remap;
        let id_now = |a: u32, id: u32| remap.get(a as usize).and_then(|m| m.get(id as usize)).copied().unwrap_or(crate::format::SUPERSEDED);
        publish(&mut outs, &stored, self.id, self.cipher.as_deref(), &id_now)?;
        Ok(self.report(manifest, &outs, stats, file_count, entry_count))
    }

    /// The pipeline drained: the compressors' counts and each stripe writer's output, or the
    /// first error any thread met.
    fn drain(&mut self) -> Result<(CompressStats, Vec<WriterOut>)> {
        if let Some(mut f) = self.stream_feeder.take() {
            f.finish();
        }
        self.shared.progress.end();
        self.job_tx = None;
        let mut stats = CompressStats::default();
        for h in self.compressors.drain(..) {
            match h.join() {
                Ok(s) => {
                    stats.zero += s.zero;
                    stats.raw += s.raw;
                    stats.adopted += s.adopted;
                }
                Err(_) => self.shared.fail(Error::new(ErrorKind::Io, "a compressor thread panicked")),
            }
        }
        let outs: Vec<Option<WriterOut>> = self.writers.drain(..).map(|h| h.join().unwrap_or(None)).collect();
        if let Some(e) = self.shared.take_error() {
            return Err(e);
        }
        if self.shared.is_cancelled() {
            return Err(Error::new(ErrorKind::Cancelled, "backup cancelled"));
        }
        let outs: Vec<WriterOut> = outs.into_iter().collect::<Option<_>>().ok_or_else(|| Error::new(ErrorKind::Io, "a stripe writer stopped without an error (internal)"))?;
        Ok((stats, outs))
    }

    /// The frames kept of earlier attempts, given this set's ids: each chunk of a file taken
    /// joins the checksums and tiling of the file, every other kept byte is superseded.
    fn take_kept(&mut self, outs: &mut [WriterOut]) -> Result<()> {
        for (k, out) in outs.iter_mut().enumerate() {
            for (a, e) in &out.kept {
                let id = self.remap.get(*a as usize).and_then(|m| m.get(e.file_id as usize)).copied().unwrap_or(crate::format::SUPERSEDED);
                // Pushed to the index with the attempt's id, counted as a file's bytes.
                if e.is_superseded() {
                    // Counted so when pushed.
                } else if id == crate::format::SUPERSEDED {
                    out.index.raw_bytes -= u64::from(e.raw_len).min(out.index.raw_bytes);
                    out.index.superseded_bytes += u64::from(e.raw_len);
                } else {
                    out.chunks.push(crate::manifest::ChunkRef { file_id: id, offset: e.offset, len: e.raw_len, crc: e.raw_crc, stripe: k })?;
                }
            }
        }
        Ok(())
    }

    /// The manifest of what was backed up (its entries are in the pages already written).
    fn manifest(&mut self, source: serde_json::Value, findings: Vec<String>) -> Manifest {
        Manifest {
            format_version: FORMAT_VERSION,
            backup_id: self.id.to_hex(),
            label: self.opts.label.clone(),
            tool: format!("sheaf {}", env!("CARGO_PKG_VERSION")),
            started_unix_ms: self.started_unix_ms,
            finished_unix_ms: unix_ms(SystemTime::now()),
            roots: std::mem::take(&mut self.roots),
            stripes: self.opts.targets.iter().map(|t| StripeRef { name: t.file_name(), path: t.display() }).collect(),
            options: OptionsUsed {
                compression: self.opts.codec.to_string(),
                codec: self.opts.codec.kind.name().into(),
                level: self.opts.codec.level,
                transfer_size: self.tuning.transfer_size as u64,
                buffer_count: self.tuning.buffer_count as u64,
                readers: self.readers() as u64,
                threads: self.tuning.threads as u64,
            },
            entries: Vec::new(),
            bytes_read: self.shared.bytes.load(std::sync::atomic::Ordering::Relaxed),
            warnings: std::mem::take(&mut self.warnings),
            check_failures: findings,
            changed_files: std::mem::take(&mut self.changed_files),
            vanished_files: std::mem::take(&mut self.vanished_files),
            source,
            backup_type: self.lineage.as_ref().map_or(BackupType::Full, |l| l.backup_type),
            chain: self.lineage.as_ref().map(|l| l.chain.clone()).unwrap_or_default(),
            resumed: self.resume.as_ref().map(|r| crate::manifest::Resumed {
                attempt: r.attempt,
                first_started_unix_ms: r.first_started_unix_ms,
                files: self.taken.0,
                bytes: self.taken.1,
                kept_stored_bytes: 0,
            }),
        }
    }

    /// What the backup came to, for the caller to show and record.
    fn report(&self, manifest: Manifest, outs: &[WriterOut], stats: CompressStats, file_count: usize, entry_count: usize) -> BackupReport {
        let frames: u64 = outs.iter().map(|o| o.frames).sum();
        BackupReport {
            backup_id: self.id.to_hex(),
            label: manifest.label.clone(),
            bytes_read: manifest.bytes_read,
            bytes_held: outs.iter().map(|o| o.index.raw_bytes).sum(),
            superseded_bytes: outs.iter().map(|o| o.index.superseded_bytes).sum(),
            bytes_written: outs.iter().map(|o| o.sink.written()).sum(),
            seconds: self.started.elapsed().as_secs_f64(),
            stripes: outs.len(),
            encryption: if self.cipher.is_some() { "aes-256-gcm" } else { "none" }.into(),
            targets: self.opts.targets.iter().map(Location::display).collect(),
            codec: self.opts.codec.kind.name().into(),
            compression: self.opts.codec.to_string(),
            level: self.opts.codec.level,
            transfer_size: self.tuning.transfer_size as u64,
            buffer_count: self.tuning.buffer_count,
            readers: self.readers(),
            threads: self.tuning.threads,
            buffer_len: self.tuning.buffer_len as u64,
            target_memory_bytes: self.tuning.target_memory_bytes,
            memory_budget_bytes: self.tuning.memory_budget_bytes,
            files: file_count,
            entries: entry_count,
            frames,
            zero_chunks: stats.zero,
            raw_chunks: stats.raw,
            stored_chunks: stats.adopted,
            warnings: manifest.warnings,
            changed_files: manifest.changed_files,
            vanished_files: manifest.vanished_files,
            check_failures: manifest.check_failures,
            auto_levels: self.auto.as_ref().map(|a| a.levels()),
            resumed: manifest.resumed.clone(),
        }
    }

    /// Write the manifest's pages to `region` and say how many regular files they hold: the
    /// entries read back in id order, each with what reading it came to, its checksum combined
    /// from its chunks' (merged from every stripe in file order, and checked to tile the file
    /// exactly; for a file held in part, the bytes held and their checksum). Files that changed or
    /// vanished while read, where that is expected, are listed by name.
    fn write_pages(&mut self, region: &mut crate::manifest::pages::RegionWriter<'_, Vec<u8>>, outs: &mut [WriterOut]) -> Result<usize> {
        let count = self.entries.len();
        let entries = std::mem::replace(&mut self.entries, EntrySpill::new()?).into_reader()?;
        let mut merged = ChunkSorter::merge(outs.iter_mut().map(|o| std::mem::take(&mut o.chunks)).collect());
        let mut outcomes = self.outcomes.in_order(count);
        let untiled = |f| Error::new(ErrorKind::Io, format!("internal: the chunks written do not tile the files: {f:?}"));
        let mut files = 0;
        let tiled = (|| -> Result<()> {
            let mut tiler = Tiler::new(merged.by_ref());
            for (id, e) in entries.enumerate() {
                let mut e = e?;
                if let Some(Outcome { size, vanished, changed }) = outcomes.next_outcome()?.flatten() {
                    (e.size, e.vanished) = (size, vanished);
                    if self.changes_expected && (vanished || changed) {
                        let root = &self.roots[e.root as usize].name;
                        let shown = if root.is_empty() { e.path.clone() } else { format!("{root}/{}", e.path) };
                        if vanished { &mut self.vanished_files } else { &mut self.changed_files }.push(shown);
                    }
                }
                // A hard link whose file vanished before it was read has nothing to name.
                if let (EntryKind::Hardlink, Some(first)) = (e.kind, e.link) {
                    if self.outcomes.get(first)?.is_some_and(|o| o.vanished) {
                        e.vanished = true;
                    }
                }
                match (tiler.next(id, &e).map_err(untiled)?, &mut e.delta) {
                    (Some((crc, bytes)), Some(d)) => (d.bytes, d.crc32c) = (bytes, crc),
                    (sum, _) => e.crc32c = sum.map(|s| s.0),
                }
                files += usize::from(e.kind == EntryKind::File);
                region.push(e)?;
            }
            tiler.finish().map_err(untiled)
        })();
        // A temporary file that could not be read ends the merge early: that, not the chunks,
        // is what a tiling fault that follows is about.
        if let Some(e) = merged.error() {
            return Err(e);
        }
        tiled?;
        Ok(files)
    }
}

/// Every stripe's footer (index, manifest, trailer) written and made durable, in parallel (each
/// stripe's fsync is independent), then every stripe published; on any error every stripe is
/// discarded, so a set is whole or gone.
fn publish(outs: &mut [WriterOut], stored: &[u8], id: BackupId, cipher: Option<&Cipher>, remap: &(dyn Fn(u32, u32) -> u32 + Sync)) -> Result<()> {
    let stripe_count = outs.len() as u16;
    let results: Vec<Result<()>> = thread::scope(|s| {
        let hs: Vec<_> = outs.iter_mut().enumerate().map(|(k, out)| s.spawn(move || write_footer(out, k as u16, stripe_count, id, stored, cipher, remap))).collect();
        hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(Error::new(ErrorKind::Io, "footer writer panicked")))).collect()
    });
    if let Some(e) = results.into_iter().find_map(Result::err) {
        outs.iter_mut().for_each(|o| o.sink.discard());
        return Err(e);
    }
    for k in 0..outs.len() {
        if let Err(e) = outs[k].sink.publish() {
            outs.iter_mut().for_each(|o| o.sink.discard());
            return Err(e);
        }
    }
    Ok(())
}
