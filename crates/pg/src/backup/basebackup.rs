//! `sheaf backup URL --via base-backup`: the cluster read over PostgreSQL's replication protocol,
//! with nothing of sheaf's on the database host, as pg_basebackup reads it. `BASE_BACKUP` (the
//! framing of PostgreSQL 15 and newer: one COPY stream, each archive announced by an `n`
//! message, its tar bytes in `d` messages) starts the backup, sends every tablespace's archive
//! and then the main one (pg_control last, then the WAL from start to stop, with their `.done`
//! marks), and stops it. The tar members are cut into chunks as they arrive and compressed on
//! this host's cores; page checksums are verified by the server as it reads (a failure fails
//! the command). A tablespace's link comes as a line of tablespace_map, and is added to the set
//! as a link as well, as in sheaf's own backups.

use std::sync::Arc;
use std::time::Instant;

use sheaf_core::manifest::{BackupType, Entry, EntryKind, Root};
use sheaf_core::{Backup, BackupOptions, Error, ErrorKind, Progress, Result, Tuning};

use crate::backup::facts::{ClusterFacts, Taken, WalSpan};
use crate::backup::options::{PgBackupOptions, PgBackupReport};
use crate::backup::tarstream::{Event, Kind, TarStream};
use crate::cluster::lsn::Lsn;
use crate::cluster::walname;
use crate::connect::server::{Server, StopInfo};
use crate::connect::wire::{Copy, Replication, Row};

fn lsn_of(rows: &[Row], what: &str) -> Result<(Lsn, u32)> {
    let row = rows.first().ok_or_else(|| Error::corrupt(format!("BASE_BACKUP sent no {what} position")))?;
    let lsn = row.first().and_then(|l| l.as_deref()?.parse().ok()).ok_or_else(|| Error::corrupt(format!("BASE_BACKUP's {what} position does not parse")))?;
    let tli = row.get(1).cloned().flatten().and_then(|t| t.parse().ok()).unwrap_or(1);
    Ok((lsn, tli))
}

fn cstring(b: &[u8]) -> (&str, &[u8]) {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    (std::str::from_utf8(&b[..end]).unwrap_or_default(), b.get(end + 1..).unwrap_or_default())
}

/// The member being streamed into the set.
struct Current {
    file_id: u32,
    offset: u64,
    size: u64,
    /// What has come and is not yet handed on (at most a transfer size, or a small file whole).
    pending: Vec<u8>,
    /// Kept whole for the record (backup_label, tablespace_map).
    keep: Option<Vec<u8>>,
}

/// Take a backup of the server at `pg.url` over the replication protocol.
///
/// # Errors
/// What [`Server::check`] refuses; a server older than 15 (the new BASE_BACKUP framing); a role
/// without REPLICATION or a pg_hba.conf without a `replication` line for it; the server's errors
/// (page checksum failures among them); the link's. Nothing is kept then.
pub fn backup_via_base_backup(pg: &PgBackupOptions, opts: &BackupOptions, progress: Arc<dyn Progress>) -> Result<PgBackupReport> {
    let t0 = Instant::now();
    if pg.parent.is_some() {
        return Err(Error::invalid("--via base-backup reads every file whole (BASE_BACKUP sends no less): take incrementals with the agent (--agent) or on the database host"));
    }
    if pg.remote.is_some() || pg.standby.is_some() || pg.wal_from_archive {
        return Err(Error::invalid("--via base-backup reads everything over the replication connection: drop --agent, --standby and --wal-from archive"));
    }
    let mut server = Server::connect(&pg.url)?;
    let facts = server.check_with(false)?;
    pg.check_cluster(server.url(), facts.system_identifier)?;
    let mut opts = opts.clone();
    if opts.expected_bytes.is_none() {
        opts.expected_bytes = Some(server.databases_size()?);
    }
    let tablespaces: Vec<_> = server.tablespaces()?.into_iter().filter(|t| t.location.starts_with('/')).collect();
    let tuning = Tuning::resolve(&opts, 1)?;
    let ts = tuning.transfer_size;
    let mut session = Backup::start(&opts, tuning, progress)?;
    session.expect_changes();
    let place = facts.data_directory.clone().unwrap_or_else(|| "(read over the replication protocol)".into());
    let main_root = session.add_root(Root { name: String::new(), path: place });
    let mut roots = vec![(String::new(), main_root)];
    for t in &tablespaces {
        let id = session.add_root(Root { name: format!("pg_tblspc/{}", t.oid), path: t.location.clone() });
        roots.push((t.oid.to_string(), id));
    }

    // A temporary slot, held by the SQL session, keeps the WAL the stream ends with from being
    // recycled while the files are sent (pg_basebackup -X fetch has no such guard).
    let slot = pg.slot.clone().unwrap_or_else(|| format!("sheaf_{}", std::process::id()));
    server.create_slot(&slot)?;
    let mut repl = Replication::connect(&pg.url)?;
    let label = opts.label.clone().unwrap_or_else(|| format!("sheaf backup {}", session.id().to_hex()));
    let command = format!(
        "BASE_BACKUP (LABEL '{}', CHECKPOINT '{}', WAL true, WAIT false, MANIFEST 'no', TABLESPACE_MAP true, PROGRESS false)",
        label.replace('\'', "''"),
        if pg.spread_checkpoint { "spread" } else { "fast" }
    );
    let (start_lsn, timeline) = lsn_of(&repl.start_copy(&command)?, "start")?;
    let mut catalog_warnings = Vec::new();
    let databases = server.catalog(&pg.url, &mut catalog_warnings)?;
    session.warnings.extend(catalog_warnings);

    let mut root = main_root;
    let mut tar = TarStream::default();
    let mut current: Option<Current> = None;
    let mut kept: Vec<(String, Vec<u8>)> = Vec::new();
    let mut wal_files = Vec::new();
    let mut saw_root = std::collections::HashSet::new();
    let mut owner = (0u32, 0u32);
    loop {
        let data = match repl.next_copy()? {
            Copy::Data(d) => d,
            Copy::Done => break,
        };
        let (&kind, body) = data.split_first().ok_or_else(|| Error::corrupt("BASE_BACKUP sent an empty message"))?;
        match kind {
            b'n' => {
                let (archive, rest) = cstring(body);
                let (location, _) = cstring(rest);
                root = if location.is_empty() {
                    main_root
                } else {
                    let oid = archive.trim_end_matches(".tar");
                    roots
                        .iter()
                        .find(|(o, _)| o == oid)
                        .map(|(_, id)| *id)
                        .ok_or_else(|| Error::new(ErrorKind::Source, format!("tablespace {oid} ({location}) appeared as the backup started: take the backup again")))?
                };
                tar = TarStream::default();
            }
            b'd' => {
                let session = &mut session;
                let (current, kept, wal_files, saw_root, owner) = (&mut current, &mut kept, &mut wal_files, &mut saw_root, &mut owner);
                tar.feed(body, &mut |e| {
                    match e {
                        Event::Member(m) => {
                            // The archive's root: owned as its members are (the server's user).
                            if saw_root.insert(root) {
                                *owner = (m.uid, m.gid);
                                session.add_entry(root, Entry { path: String::new(), kind: EntryKind::Dir, mode: 0o700, uid: m.uid, gid: m.gid, ..Default::default() })?;
                            }
                            if m.name.is_empty() {
                                return Ok(());
                            }
                            let entry = Entry {
                                path: m.name.clone(),
                                kind: match m.kind {
                                    Kind::File => EntryKind::File,
                                    Kind::Dir => EntryKind::Dir,
                                    Kind::Symlink => EntryKind::Symlink,
                                },
                                mode: m.mode,
                                mtime_ns: m.mtime * 1_000_000_000,
                                uid: m.uid,
                                gid: m.gid,
                                size: m.size,
                                target: (m.kind == Kind::Symlink).then(|| m.link.clone()),
                                ..Default::default()
                            };
                            let file_id = session.add_entry(root, entry)?;
                            if m.kind == Kind::File {
                                if root == main_root {
                                    if let Some(seg) = m.name.strip_prefix("pg_wal/").filter(|n| walname::is_segment_name(n)) {
                                        wal_files.push(seg.to_string());
                                    }
                                }
                                let keep = (root == main_root && (m.name == "backup_label" || m.name == "tablespace_map")).then(Vec::new);
                                *current = Some(Current { file_id, offset: 0, size: m.size, pending: Vec::with_capacity((m.size as usize).min(ts)), keep });
                            }
                        }
                        Event::Data(d) => {
                            let c = current.as_mut().ok_or_else(|| Error::corrupt("tar data outside a file"))?;
                            if let Some(k) = &mut c.keep {
                                k.extend_from_slice(d);
                            }
                            let mut d = d;
                            while !d.is_empty() {
                                let n = (ts - c.pending.len()).min(d.len());
                                c.pending.extend_from_slice(&d[..n]);
                                d = &d[n..];
                                // A small file goes whole (and is packed with others); a large
                                // one a transfer size at a time.
                                if c.pending.len() == ts && c.size >= sheaf_core::format::PACK_LIMIT {
                                    session.add_piece(c.file_id, c.offset, &c.pending)?;
                                    c.offset += c.pending.len() as u64;
                                    c.pending.clear();
                                }
                            }
                        }
                        Event::End => {
                            if let Some(mut c) = current.take() {
                                if !c.pending.is_empty() {
                                    session.add_piece(c.file_id, c.offset, &c.pending)?;
                                }
                                if let Some(k) = c.keep.take() {
                                    let name = if kept.iter().any(|(n, _)| n == "backup_label") { "tablespace_map" } else { "backup_label" };
                                    kept.push((name.to_string(), k));
                                }
                            }
                        }
                    }
                    Ok(())
                })?;
            }
            b'p' | b'm' => {}
            k => return Err(Error::corrupt(format!("BASE_BACKUP sent a message of kind '{}'", k as char))),
        }
    }
    let (stop_lsn, stop_tli) = lsn_of(&repl.finish_copy()?, "end")?;
    session.end_pieces()?;
    let backup_label = kept.iter().find(|(n, _)| n == "backup_label").map(|(_, b)| String::from_utf8_lossy(b).into_owned()).unwrap_or_default();
    let tablespace_map = kept.iter().find(|(n, _)| n == "tablespace_map").map(|(_, b)| String::from_utf8_lossy(b).into_owned()).unwrap_or_default();
    if backup_label.is_empty() {
        return Err(Error::corrupt("BASE_BACKUP sent no backup_label"));
    }
    // The links the server left out for tablespace_map, as sheaf's own backups hold them.
    for t in &tablespaces {
        let (uid, gid) = owner;
        session.add_entry(
            main_root,
            Entry { path: format!("pg_tblspc/{}", t.oid), kind: EntryKind::Symlink, mode: 0o777, uid, gid, target: Some(t.location.clone()), ..Default::default() },
        )?;
    }
    let stop = StopInfo { lsn: stop_lsn, backup_label, tablespace_map, timeline: stop_tli };
    let span = WalSpan::of((start_lsn, timeline), &stop, facts.wal_segment_size)?;
    let taken_on = facts.in_recovery.then(|| "standby".to_string());
    let recorded = ClusterFacts::taken(Taken {
        server: facts,
        url: server.url().to_string(),
        start: (start_lsn, timeline),
        stop,
        span,
        wal_files: wal_files.len(),
        tablespaces,
        databases,
        // The server verified the pages as it read them: a failure would have failed the stream.
        pages: (0, 0),
        excluded_entries: 0,
        taken_on,
        standby_url: None,
        // The server sends its folders as folders: where a link pointed stays on its host.
        links: Vec::new(),
    });
    let report = session.finish(recorded.to_value())?;
    server.drop_slot(&slot);
    Ok(PgBackupReport {
        report,
        facts: recorded,
        seconds_total: t0.elapsed().as_secs_f64(),
        backup_type: BackupType::Full,
        method: Some("BASE_BACKUP over the replication protocol".into()),
        full_because: None,
    })
}
