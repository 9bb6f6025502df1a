//! `sheaf copy`: backups copied from one repository into another (another disk, bucket, region or
//! cloud), with the WAL they need, their pins, annotations and drills: every object as stored, no
//! byte decompressed, every frame's checksum checked on the way ([`sheaf_core::transfer`]).
//!
//! Order makes it safe to stop at any moment and to run again: a backup's WAL first, then its
//! stripes under a lock of this process (so that the target's expire leaves them alone), its
//! record last, as a backup publishes itself. A second run finds what is there (records, stripes
//! of the same size, WAL by name) and copies only the rest, so an interrupted copy resumes, and a
//! finished one copies nothing and says so.
//!
//! Into an encrypted repository: from another, each object's data key is sealed again for the
//! target's keys (its key block rewritten: [`sheaf_core::crypto::Keys::rekey`]) and every sealed
//! byte after it copied as stored; from one that is not, each frame's stored bytes are sealed as
//! they are, under a data key of each object's own (a set's, shared by its stripes), with the
//! index, manifest and trailer written again to match ([`sheaf_core::transfer::copy_sealing`]).
//! Either way the copy opens with the target's secret, not the source's, and nothing is
//! decompressed.
//!
//! What is refused: a target of another cluster (any history that differs), a backup held under
//! the same id with another set in it, and a copy out of an encrypted repository into one that is
//! not (its backups would be left in the clear) or into an empty place (it must be made an
//! encrypted repository first).

use std::collections::{BTreeSet, HashMap};

use serde::Serialize;
use sheaf_core::crypto::{Encryption, KeyBlock, Keys};
use sheaf_core::repo::Place;
use sheaf_core::stop::Stop;
use sheaf_core::storage::Stored;
use sheaf_core::storage::{StripeSink, StripeSource};
use sheaf_core::transfer::{copy_checked, copy_rekeyed, copy_sealing, SealWith, Transferred};
use sheaf_core::{Error, ErrorKind, Result};

use crate::cluster::walname::{WalFile, WalKind};
use crate::maintain::expire::{plan_all, Retention};
use crate::repo::histories::{self, History};
use crate::repo::id::BackupId;
use crate::repo::records::{chain_of, complete, pick, BackupLock, BackupRecord, BackupRef};
use crate::repo::{paths, Repo};

/// Which backups to copy.
#[derive(Clone, Debug)]
pub enum Which {
    /// One (with the backups it builds on); `latest` is the newest of every history's.
    Set(BackupRef),
    /// Every finished backup the target's retention would keep (all, without one).
    All(Option<Retention>),
}

/// What [`copy`] did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Copied {
    /// Backups copied now, oldest first.
    pub copied: Vec<BackupId>,
    /// Backups the target held already.
    pub already: Vec<BackupId>,
    /// With `--all`: backups the target's retention would not keep, left out.
    pub left_out: Vec<BackupId>,
    /// WAL files (and their summaries) copied.
    pub wal_files: u64,
    /// Objects copied, all told.
    pub objects: u64,
    /// Their bytes, as stored.
    pub bytes: u64,
    /// Frames checked on the way.
    pub frames: u64,
    /// The target was empty and made a repository of the same cluster.
    pub created: bool,
    /// Histories (after pg_upgrade) the target did not have, recorded in it.
    pub histories_added: Vec<u32>,
}

impl Copied {
    /// Nothing was copied: the target held everything asked for.
    pub fn nothing(&self) -> bool {
        self.objects == 0
    }
}

/// How objects go into an encrypted repository.
enum Crypt<'a> {
    /// From another: each one's data key, opened with the source's keys, sealed for the target's.
    Rekey { from: &'a Keys, to: Encryption },
    /// From one that is not: each frame sealed as it is stored, under a data key of each object's
    /// own (a set's, shared by its stripes).
    Seal(Encryption),
}

/// Copy `src` into `sink` checked: as stored ([`copy_checked`]), with its key block sealed for
/// the target's keys ([`copy_rekeyed`]), or sealed ([`copy_sealing`]) under `set_key` (a set's
/// stripes) or a data key of its own.
fn transfer(src: &dyn StripeSource, sink: Box<dyn StripeSink>, stop: &Stop, crypt: Option<&Crypt<'_>>, set_key: Option<&SealWith>) -> Result<Transferred> {
    match crypt {
        None => copy_checked(src, sink, stop),
        Some(Crypt::Rekey { from, to }) => copy_rekeyed(src, sink, stop, &|b: &KeyBlock| from.rekey(b, to)),
        Some(Crypt::Seal(enc)) => match set_key {
            Some(with) => copy_sealing(src, sink, stop, with),
            None => copy_sealing(src, sink, stop, &seal_with(enc)?),
        },
    }
}

/// A new data key under the target's keys.
fn seal_with(enc: &Encryption) -> Result<SealWith> {
    let (block, cipher) = enc.keys.seal(enc.kdf)?;
    Ok(SealWith::new(block, cipher))
}

/// Copy the backups `which` names from `from` into the repository at `to` (made, when the place
/// is empty, for the same cluster). Asked to `stop`, it stops between objects: what was copied
/// stays, and the next run goes on from there.
///
/// # Errors
/// A target of another cluster, a backup the target holds under the same id with another set; an
/// encrypted source and a target that is not; keys that do not open the source or the target; a
/// damaged object in the source (named; nothing of it is published); [`ErrorKind::Cancelled`]
/// when stopped; the stores' errors.
pub fn copy(from: &Repo, to: &Place, which: &Which, stop: &Stop) -> Result<Copied> {
    crate::repo::meta::postgres_only(from, "sheaf copy (for now)")?;
    let mut done = Copied::default();
    // Which side is encrypted, from each `repo.json` (read without keys), before anything opens
    // or is written: a copy goes between two that are, or two that are not.
    let sealed = from.place().key_block()?.is_some();
    let to_sealed = match to.key_block() {
        Ok(k) => Some(k.is_some()),
        Err(e) if e.kind() == ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    match (sealed, to_sealed) {
        (true, None) => {
            return Err(Error::invalid(format!(
                "{} is encrypted and {} holds no repository: a copy keeps every frame sealed, so make it an encrypted repository of its own first (`sheaf init --repo {} URL` with --passphrase-file, --encryption-key-file or --key-command), then copy again (with --to-passphrase-file, --to-encryption-key-file or --to-key-command when its secret is not this one)",
                from.display(),
                to.display(),
                to.display()
            )));
        }
        (true, Some(false)) => {
            return Err(Error::invalid(format!(
                "{} is encrypted and {} is not: a copy there would leave its backups in the clear; copy into an encrypted repository (`sheaf init` one with a secret)",
                from.display(),
                to.display()
            )))
        }
        _ => {}
    }
    let target = match crate::repo::meta::open(to) {
        Ok(t) => t,
        Err(e) if e.kind() == ErrorKind::Key => {
            return Err(Error::new(
                ErrorKind::Key,
                format!(
                    "{}; the target's own secret is given with --to-passphrase-file, --to-encryption-key-file or --to-key-command (without one, it is the secret given for --repo)",
                    e.message()
                ),
            ));
        }
        Err(e) if e.kind() == ErrorKind::NotFound => {
            to.check_writer()?;
            done.created = true;
            // The same cluster, made now and unlocked: a locked copy is one `sheaf init --lock`
            // made first, on a bucket with Object Lock.
            let mut meta = from.root().meta().clone();
            meta.lock = None;
            meta.format = meta.format.min(1);
            meta.created = sheaf_core::time::utc_now();
            to.init(&meta)?;
            crate::repo::meta::open(to)?
        }
        Err(e) => return Err(e),
    };
    let to_enc = || target.encryption()?.ok_or_else(|| Error::new(ErrorKind::Key, format!("{} is encrypted: give its secret (--to-passphrase-file ...)", target.display())));
    let crypt = match (sealed, to_sealed == Some(true)) {
        (true, _) => {
            let from_keys = from.keys().ok_or_else(|| Error::new(ErrorKind::Key, format!("{} is encrypted: give its secret", from.display())))?;
            Some(Crypt::Rekey { from: from_keys, to: to_enc()? })
        }
        (false, true) => Some(Crypt::Seal(to_enc()?)),
        (false, false) => None,
    };
    let rekey = crypt.as_ref();
    target.check_writer()?;
    let (src, dst) = align(from, &target, stop, &mut done, rekey)?;
    // What to copy, per history, bases first.
    let mut chosen: Vec<(usize, Vec<BackupRecord>)> = Vec::new();
    let records: Vec<Vec<BackupRecord>> = src.iter().map(|h| complete(&h.repo)).collect::<Result<_>>()?;
    let mut want: Vec<(usize, BackupId)> = Vec::new();
    match which {
        // Newest history first: `latest` is the newest history's newest.
        Which::Set(r) => {
            let found = records.iter().enumerate().rev().find_map(|(k, rs)| pick(rs, r).ok().map(|r| (k, r.id.clone())));
            match found {
                Some(f) => want.push(f),
                None => return Err(pick(records.last().map_or(&[][..], |v| &v[..]), r).err().unwrap_or_else(|| Error::invalid(format!("no backup {r}")))),
            }
        }
        Which::All(keep) => {
            let kept: Option<BTreeSet<BackupId>> = match keep {
                Some(k) => Some(plan_all(from, k, sheaf_core::time::now_ms() / 1000)?.into_iter().flat_map(|p| p.plan.kept).collect()),
                None => None,
            };
            for (k, rs) in records.iter().enumerate() {
                for r in rs {
                    if kept.as_ref().is_none_or(|set| set.contains(&r.id)) {
                        want.push((k, r.id.clone()));
                    } else {
                        done.left_out.push(r.id.clone());
                    }
                }
            }
        }
    }
    for (k, rs) in records.iter().enumerate() {
        let mut ids: BTreeSet<BackupId> = BTreeSet::new();
        for (_, id) in want.iter().filter(|(w, _)| *w == k) {
            let r = rs.iter().find(|r| &r.id == id).expect("picked from these");
            ids.extend(chain_of(rs, r)?.iter().map(|b| b.id.clone()));
        }
        if !ids.is_empty() {
            chosen.push((k, rs.iter().filter(|r| ids.contains(&r.id)).cloned().collect()));
        }
    }
    for (k, backups) in &chosen {
        let (s, d) = (&src[*k].repo, &dst[*k].repo);
        // Those the target lacks are locked there first, each naming its chain and where its WAL
        // starts: an expire on the target meanwhile keeps their bases and their WAL.
        let mut missing = Vec::new();
        for r in backups {
            if held(s, d, r)? {
                done.already.push(r.id.clone());
            } else {
                if let Some(Crypt::Seal(_)) = rekey {
                    sealable(s, r)?;
                }
                lock(d, r)?;
                missing.push(r);
            }
        }
        wal(s, d, backups, stop, &mut done, rekey)?;
        for r in missing {
            backup(s, d, r, stop, &mut done, rekey)?;
        }
        horizon(s, d)?;
    }
    Ok(done)
}

/// The source's retention horizon carried over to the target (never lowering the target's):
/// the WAL expire removed before it on purpose is absent from the copy too, and must not look
/// like damage there. A target that may not move it (a client of a backup host's agent) is said,
/// not failed: the copy is whole without it.
fn horizon(s: &Repo, d: &Repo) -> Result<()> {
    let Some(h) = crate::repo::horizon::read(s)? else { return Ok(()) };
    let Some(first) = WalFile::parse(&h.first_kept, s.meta().wal_segment_size) else { return Ok(()) };
    if let Err(e) = crate::repo::horizon::raise(d, &first) {
        tracing::warn!(target = d.display(), error = %e, "the retention horizon was not copied: verify there may call WAL that retention removed missing");
    }
    Ok(())
}

/// Whether `d` holds backup `r` already; refused when it holds another set under its id.
fn held(s: &Repo, d: &Repo, r: &BackupRecord) -> Result<bool> {
    let record = paths::record(&r.id);
    if !d.exists(&record)? {
        return Ok(false);
    }
    let theirs: BackupRecord = d.get_json(&record)?;
    if theirs.backup_id != r.backup_id {
        return Err(Error::invalid(format!(
            "{} holds backup {} with set {}, and {} holds it with set {}: not the same backup; remove one (sheaf expire --set) before copying",
            d.display(),
            r.id,
            theirs.backup_id,
            s.display(),
            r.backup_id
        )));
    }
    Ok(true)
}

/// Refuse, before anything of it is copied, a backup whose stripes a copy cannot seal (a format
/// older than [`sheaf_core::transfer::OLDEST_SEALED`]).
fn sealable(s: &Repo, r: &BackupRecord) -> Result<()> {
    let Some(first) = r.stripes.first() else { return Ok(()) };
    let src = s.open(first)?;
    let mut h = vec![0u8; sheaf_core::format::HEADER_LEN];
    src.read_exact_at(&mut h, 0)?;
    let version = sheaf_core::format::StripeHeader::decode(&h)?.version;
    if version < sheaf_core::transfer::OLDEST_SEALED {
        return Err(Error::invalid(format!(
            "backup {} is of stripe format {version}: a copy seals backups of format {} and later into an encrypted repository; restore it and back it up into the encrypted repository instead, or copy it into one that is not encrypted",
            r.id,
            sheaf_core::transfer::OLDEST_SEALED
        )));
    }
    Ok(())
}

/// The lock of this process on backup `r` in `d`, replacing one a stopped copy left (removed
/// first: a client of a backup host's agent may remove a lock, not replace one).
fn lock(d: &Repo, r: &BackupRecord) -> Result<()> {
    let name = paths::lock(&r.id);
    d.delete(&name)?;
    let mut l = BackupLock::ours(&r.id, sheaf_core::time::now_ms() / 1000);
    l.chain = r.chain.clone();
    l.start_wal = Some(r.start_wal.clone());
    d.put_json(&name, &l, false)
}

/// The source's histories and the target's, one for one: the target's must be the source's
/// clusters; histories it lacks (the source went through pg_upgrade since) are recorded in it.
fn align(from: &Repo, target: &Repo, stop: &Stop, done: &mut Copied, rekey: Option<&Crypt<'_>>) -> Result<(Vec<History>, Vec<History>)> {
    let src = histories::all(from)?;
    let mut dst = histories::all(target)?;
    for (k, h) in src.iter().enumerate() {
        let theirs = h.repo.meta().system_identifier;
        match dst.get(k) {
            Some(d) if d.repo.meta().system_identifier == theirs => {}
            Some(d) => {
                return Err(Error::invalid(format!(
                    "{} is a repository of cluster {} ({}), and {} of cluster {theirs}: a copy goes only into a repository of the same cluster; give another place (an empty one becomes a copy)",
                    target.display(),
                    d.repo.meta().system_identifier,
                    d.describe(),
                    from.display()
                )));
            }
            None => {
                let root = target.root();
                let name = paths::history_record(h.number);
                root.prepare(&format!("{}/{}", paths::history_folder(h.number), sheaf_core::repo::META))?;
                transfer(from.root().open(&name)?.as_ref(), root.location(&name).create(false, 0)?, stop, rekey, None)?;
                done.histories_added.push(h.number);
                dst = histories::all(target)?;
            }
        }
    }
    if dst.len() > src.len() {
        return Err(Error::invalid(format!(
            "{} has been upgraded further than {} ({} histories against {}): copy from the repository that records the newest cluster",
            target.display(),
            from.display(),
            dst.len(),
            src.len()
        )));
    }
    Ok((src, dst))
}

/// Copy `name` from `s` into `d` as stored, checked; counted.
fn one(s: &Repo, d: &Repo, name: &str, stop: &Stop, done: &mut Copied, rekey: Option<&Crypt<'_>>, set_key: Option<&SealWith>) -> Result<()> {
    if stop.asked() {
        return Err(Error::new(ErrorKind::Cancelled, "copy stopped when asked; run it again to go on from here"));
    }
    d.prepare(name)?;
    let src = s.open(name)?;
    // Sealed, an object grows by 28 bytes a frame (and a key block): room for it in the hint.
    let hint = if matches!(rekey, Some(Crypt::Seal(_))) { src.len() + src.len() / 64 + 4096 } else { src.len() };
    let t = transfer(src.as_ref(), d.location(name).create(true, hint)?, stop, rekey, set_key)?;
    done.objects += 1;
    done.bytes += t.bytes;
    done.frames += t.frames;
    Ok(())
}

/// How many objects are copied at once: object stores answer each request with a latency that
/// one object at a time would pay in full; four keep a link busy without holding much (each copy
/// holds its stream's read-ahead and one frame).
const IN_FLIGHT: usize = 4;

/// Copy `names` from `s` into `d` as [`one`] does, up to [`IN_FLIGHT`] at a time; the first
/// failure stops the others after the object each is on, and is the error.
fn many(s: &Repo, d: &Repo, names: &[String], stop: &Stop, done: &mut Copied, rekey: Option<&Crypt<'_>>, set_key: Option<&SealWith>) -> Result<()> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    let next = AtomicUsize::new(0);
    let failed: Mutex<Option<Error>> = Mutex::new(None);
    let totals = Mutex::new(Copied::default());
    std::thread::scope(|scope| {
        for _ in 0..IN_FLIGHT.min(names.len()) {
            scope.spawn(|| {
                let mut mine = Copied::default();
                while failed.lock().expect("not poisoned").is_none() {
                    let Some(name) = names.get(next.fetch_add(1, Ordering::Relaxed)) else { break };
                    if let Err(e) = one(s, d, name, stop, &mut mine, rekey, set_key) {
                        failed.lock().expect("not poisoned").get_or_insert(e);
                    }
                }
                let mut t = totals.lock().expect("not poisoned");
                t.objects += mine.objects;
                t.bytes += mine.bytes;
                t.frames += mine.frames;
            });
        }
    });
    let t = totals.into_inner().expect("not poisoned");
    done.objects += t.objects;
    done.bytes += t.bytes;
    done.frames += t.frames;
    failed.into_inner().expect("not poisoned").map_or(Ok(()), Err)
}

/// The WAL `backups` need from the oldest one's start on (point-in-time recovery to the end of
/// the source's archive), with block summaries and every timeline history file, that `d` lacks.
fn wal(s: &Repo, d: &Repo, backups: &[BackupRecord], stop: &Stop, done: &mut Copied, rekey: Option<&Crypt<'_>>) -> Result<()> {
    let seg = s.meta().wal_segment_size;
    let Some(from) = backups.iter().filter_map(|r| WalFile::parse(&r.start_wal, seg)).map(|w| w.segno).min() else { return Ok(()) };
    let there: HashMap<String, u64> = d.list(paths::WAL)?.into_iter().map(|o| (o.name, o.size)).collect();
    let listed: Vec<Stored> = s.list(paths::WAL)?;
    let (mut files, mut summaries) = (Vec::new(), Vec::new());
    for o in listed {
        let Some(base) = o.name.rsplit('/').next() else { continue };
        let name = base.strip_suffix(".wal").or_else(|| base.strip_suffix(".sum"));
        let Some(w) = name.and_then(|n| WalFile::parse(n, seg)) else { continue };
        if w.kind != WalKind::History && w.segno < from {
            continue;
        }
        match there.get(&o.name) {
            Some(&n) if n == o.size => continue,
            // Another copy of the same content (another codec, or sealed on the way) is passed
            // over. Archived WAL is written once: a different file is named, never replaced.
            // One that cannot be read as an object of sheaf's is not the same.
            Some(_) if same_content(s, d, &o.name).unwrap_or(false) => continue,
            Some(_) if o.name.ends_with(".wal") => {
                return Err(Error::new(
                    ErrorKind::Target,
                    format!("{} holds a different {}: archived WAL is never overwritten; compare the two before moving one aside", d.describe(&o.name), w.name),
                ));
            }
            _ => {}
        }
        if o.name.ends_with(".wal") {
            files.push(o.name);
        } else {
            summaries.push(o.name);
        }
    }
    // Segments before their summaries: a summary never stands without its segment.
    many(s, d, &files, stop, done, rekey, None)?;
    done.wal_files += files.len() as u64;
    many(s, d, &summaries, stop, done, rekey, None)
}

/// Copy backup `r`, locked in `d` ([`lock`]): its stripes (those there already at their size
/// kept), then its annotations, pin and drills, then its record; then the lock goes.
fn backup(s: &Repo, d: &Repo, r: &BackupRecord, stop: &Stop, done: &mut Copied, rekey: Option<&Crypt<'_>>) -> Result<()> {
    let record = paths::record(&r.id);
    let lock = paths::lock(&r.id);
    let there: HashMap<String, u64> = d.list(&format!("{}/", paths::backup_dir(&r.id)))?.into_iter().map(|o| (o.name, o.size)).collect();
    let sizes: HashMap<String, u64> = s.list(&format!("{}/", paths::backup_dir(&r.id)))?.into_iter().map(|o| (o.name, o.size)).collect();
    // Sealed on the way, a set's stripes share one data key (a set opens with one key block): all
    // of them are written again, under a new one.
    let set_key = match rekey {
        Some(Crypt::Seal(enc)) => Some(seal_with(enc)?),
        _ => None,
    };
    let stripes: Vec<String> = match set_key {
        Some(_) => r.stripes.clone(),
        None => r.stripes.iter().filter(|n| there.get(*n).is_none_or(|k| sizes.get(*n) != Some(k))).cloned().collect(),
    };
    many(s, d, &stripes, stop, done, rekey, set_key.as_ref())?;
    if let Some(key) = &set_key {
        // Another copy of the same backup running at once seals under a key of its own: the
        // record goes only over stripes that all hold this one's.
        for name in &stripes {
            let src = d.open(name)?;
            let mut h = vec![0u8; sheaf_core::format::HEADER_LEN + sheaf_core::crypto::KEY_BLOCK_LEN];
            src.read_exact_at(&mut h, 0)?;
            if sheaf_core::format::StripeHeader::decode(&h)?.key_block != Some(key.block) {
                return Err(Error::new(
                    ErrorKind::Target,
                    format!("{} was written by another copy of backup {} running at once: run one copy at a time, then copy again", d.describe(name), r.id),
                ));
            }
        }
    }
    let extras = [paths::annotations(&r.id), crate::repo::keep::pin_object(&r.id)];
    for name in extras.iter().cloned().chain(crate::repo::drills::drill_objects(s)?.into_iter().filter(|o| crate::repo::drills::drill_backup(o) == Some(r.id.as_str()))) {
        if s.exists(&name)? && !d.exists(&name)? {
            one(s, d, &name, stop, done, rekey, None)?;
        }
    }
    one(s, d, &record, stop, done, rekey, None)?;
    d.delete(&lock)?;
    done.copied.push(r.id.clone());
    Ok(())
}

/// Whether the objects `name` in `s` and `d` hold the same content (their trailers' length and
/// CRC-32C of the content, however each was compressed, and unmasked with each one's key when
/// encrypted).
fn same_content(s: &Repo, d: &Repo, name: &str) -> Result<bool> {
    let content = |r: &Repo| -> Result<(u64, u32)> {
        let info = sheaf_core::blob::blob_info(r.open(name)?.as_ref())?;
        let mask = sheaf_core::crypto::cipher_for(info.key_block.as_ref(), r.keys(), &r.describe(name))?.map_or(0, |c| c.crc_mask());
        Ok((info.raw_len, info.crc ^ mask))
    };
    Ok(content(s)? == content(d)?)
}

/// What one repository holds that another lacks ([`compare`]).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Comparison {
    /// Finished backups of the first that the second lacks.
    pub missing_backups: Vec<BackupId>,
    /// Finished backups of the second that the first lacks (taken into it directly, or kept
    /// longer by its retention).
    pub extra_backups: Vec<BackupId>,
    /// WAL files of the first, from its oldest backup's start on, that the second lacks (the
    /// first few named).
    pub missing_wal: Vec<String>,
    /// How many there are.
    pub missing_wal_count: u64,
}

impl Comparison {
    /// Whether the second holds everything the first does.
    pub fn complete(&self) -> bool {
        self.missing_backups.is_empty() && self.missing_wal_count == 0
    }
}

/// What `b` lacks of `a` (and holds besides), history by history: backups by id, archived WAL by
/// name from `a`'s oldest backup on. Read from listings and records only.
///
/// # Errors
/// Two repositories of different clusters; the stores' errors.
pub fn compare(a: &Repo, b: &Repo) -> Result<Comparison> {
    let (ha, hb) = (histories::all(a)?, histories::all(b)?);
    let mut out = Comparison::default();
    for (k, h) in ha.iter().enumerate() {
        let theirs = hb.iter().find(|x| x.repo.meta().system_identifier == h.repo.meta().system_identifier);
        let ours = complete(&h.repo)?;
        let held: BTreeSet<BackupId> = match theirs {
            Some(t) => complete(&t.repo)?.into_iter().map(|r| r.id).collect(),
            None if k == 0 => {
                return Err(Error::invalid(format!(
                    "{} holds cluster {}, {} cluster {}: they are not copies of each other",
                    a.display(),
                    h.repo.meta().system_identifier,
                    b.display(),
                    hb[0].repo.meta().system_identifier
                )))
            }
            None => BTreeSet::new(),
        };
        out.missing_backups.extend(ours.iter().filter(|r| !held.contains(&r.id)).map(|r| r.id.clone()));
        let ids: BTreeSet<&BackupId> = ours.iter().map(|r| &r.id).collect();
        out.extra_backups.extend(held.into_iter().filter(|id| !ids.contains(id)));
        let seg = h.repo.meta().wal_segment_size;
        let Some(from) = ours.iter().filter_map(|r| WalFile::parse(&r.start_wal, seg)).map(|w| w.segno).min() else { continue };
        let there: BTreeSet<String> = match theirs {
            Some(t) => t.repo.list(paths::WAL)?.into_iter().map(|o| o.name).collect(),
            None => BTreeSet::new(),
        };
        for o in h.repo.list(paths::WAL)? {
            let Some(w) = paths::wal_name(&o.name).and_then(|n| WalFile::parse(n, seg)) else { continue };
            if (w.kind == WalKind::History || w.segno >= from) && !there.contains(&o.name) {
                out.missing_wal_count += 1;
                if out.missing_wal.len() < 5 {
                    out.missing_wal.push(w.name);
                }
            }
        }
    }
    Ok(out)
}
