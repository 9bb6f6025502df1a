//! `sheaf key`: the keys that open an encrypted repository ([`sheaf_core::keyring`]): list them,
//! add one, remove one, rotate the data key, and adopt a repository encrypted before key rings.
//!
//! Every change writes only key records (`keys/ID.key`, a few hundred bytes each): a rotation's
//! cost is one record per key, whatever the repository holds.

use serde::Serialize;
use sheaf_core::crypto::{Kdf, Keys, SecretKind};
use sheaf_core::keyring::{KeyRecord, Ring};
use sheaf_core::repo::{Place, Unlocked};
use sheaf_core::{Error, ErrorKind, Result};

use crate::repo::key_use::{self, KeyUse};

/// One key, as `sheaf key list` shows it.
#[derive(Clone, Debug, Serialize)]
pub struct KeyInfo {
    /// Its id.
    pub id: String,
    /// Which kind of secret it is.
    pub kind: SecretKind,
    /// When it was added (UTC).
    pub added: String,
    /// Who added it.
    pub added_by: String,
    /// The key ring generations it opens (all, unless a rotation was cut short).
    pub generations: u32,
    /// Whether it is the key given to this command.
    pub this: bool,
}

/// How an encrypted repository's keys open it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyScheme {
    /// Each key an envelope of the key ring (`keys/ID.key`): keys are added, removed and rotated.
    Ring,
    /// Encrypted before key rings: the one secret opens everything (`sheaf key migrate` adopts it).
    Single,
}

impl std::fmt::Display for KeyScheme {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            KeyScheme::Ring => "ring",
            KeyScheme::Single => "single",
        })
    }
}

/// The keys of an encrypted repository, as `sheaf key list` shows them.
#[derive(Clone, Debug, Serialize)]
pub struct KeyList {
    /// The repository.
    pub repo: String,
    /// Keys as envelopes of a ring, or one secret (encrypted before key rings).
    pub scheme: KeyScheme,
    /// What new objects use: the newest generation (0 for `single`).
    pub generation: u32,
    /// The keys.
    pub keys: Vec<KeyInfo>,
}

fn info(r: &KeyRecord, opened_by: Option<&str>) -> KeyInfo {
    KeyInfo {
        id: r.id.clone(),
        kind: r.kind,
        added: sheaf_core::time::utc(r.created),
        added_by: r.added_by.clone(),
        generations: r.generations,
        this: opened_by == Some(r.id.as_str()),
    }
}

fn not_encrypted(repo: &Place) -> Error {
    Error::new(
        ErrorKind::InvalidInput,
        format!("the repository {} is not encrypted: it has no keys to manage (a repository is encrypted when it is made: `sheaf init` with a key)", repo.display()),
    )
}

/// The ring, opened with the keys given: the repository must be encrypted and have one.
fn opened(repo: &Place) -> Result<Unlocked> {
    if repo.keys().is_none() {
        return Err(Error::new(
            ErrorKind::Key,
            format!("give one of the repository's current keys to open {} (--passphrase-file, --encryption-key-file, --key-command or SHEAF_PASSPHRASE)", repo.display()),
        ));
    }
    match repo.unlock()? {
        Some(u) => Ok(u),
        // No key records: not encrypted, or encrypted before key rings.
        None => Err(match single_kdf(repo)? {
            None => not_encrypted(repo),
            Some(_) => Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "the repository {} was encrypted before key rings (one secret opens it): move it to key rings first with `sheaf key migrate --repo {}`",
                    repo.display(),
                    repo.display()
                ),
            ),
        }),
    }
}

/// The KDF `repo.json` names (`None`: not encrypted).
fn single_kdf(repo: &Place) -> Result<Option<sheaf_core::crypto::KeyBlock>> {
    repo.key_block()
}

/// What `sheaf key list` shows. Needs no key for the list itself; with one, marks it.
///
/// # Errors
/// Reading the records; a repository that is not encrypted; the wrong key.
pub fn list(repo: &Place) -> Result<KeyList> {
    let records = repo.key_records()?;
    if records.is_empty() {
        return match single_kdf(repo)? {
            None => Err(not_encrypted(repo)),
            Some(b) => Ok(KeyList {
                repo: repo.display().to_string(),
                scheme: KeyScheme::Single,
                generation: 0,
                keys: vec![KeyInfo {
                    id: "-".into(),
                    kind: if matches!(b.kdf, Kdf::KeyFile) { SecretKind::Key } else { SecretKind::Passphrase },
                    added: String::new(),
                    added_by: String::new(),
                    generations: 0,
                    this: false,
                }],
            }),
        };
    }
    let u = if repo.keys().is_some() { Some(repo.unlock()?.ok_or_else(|| not_encrypted(repo))?) } else { None };
    let by = u.as_ref().map(|u| u.opened_by.as_str());
    let mut keys: Vec<KeyInfo> = records.iter().map(|r| info(r, by)).collect();
    keys.sort_by(|a, b| a.added.cmp(&b.added).then(a.id.cmp(&b.id)));
    Ok(KeyList { repo: repo.display().to_string(), scheme: KeyScheme::Ring, generation: records.iter().map(|r| r.generations).max().unwrap_or(0), keys })
}

/// Add `new` as a key of the repository (opened with the keys given).
///
/// # Errors
/// The repository does not open; `new` is a key of it already; writing the record.
pub fn add(repo: &Place, new: &Keys) -> Result<KeyInfo> {
    let u = opened(repo)?;
    u.check_current()?;
    for r in &u.records {
        if r.open(new)?.is_some() {
            return Err(Error::new(ErrorKind::InvalidInput, format!("the new secret is a key of {} already: key {} (nothing added)", repo.display(), r.id)));
        }
    }
    let record = KeyRecord::seal(new, &u.ring, sheaf_core::time::now_ms() / 1000, &sheaf_core::host::who())?;
    repo.put_key_record(&record, false)?;
    Ok(info(&record, None))
}

/// Remove key `id` (its id, or a prefix that names one key).
///
/// # Errors
/// No such key, or more than one; the last key; the key used to open (give another, which shows
/// that another opens it); deleting the record.
pub fn remove(repo: &Place, id: &str, force: bool) -> Result<KeyInfo> {
    let u = opened(repo)?;
    let matching: Vec<&KeyRecord> = u.records.iter().filter(|r| !id.is_empty() && r.id.starts_with(id)).collect();
    let ids = || u.records.iter().map(|r| r.id.as_str()).collect::<Vec<_>>().join(", ");
    let r = match matching[..] {
        [r] => r,
        [] => return Err(Error::new(ErrorKind::InvalidInput, format!("no key {id:?} in {}: its keys are {}", repo.display(), ids()))),
        _ => return Err(Error::new(ErrorKind::InvalidInput, format!("{id:?} names {} keys of {}: give more of the id ({})", matching.len(), repo.display(), ids()))),
    };
    if u.records.len() == 1 {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!("key {} is the last key of {}: without it nothing in the repository could be read; add another first (`sheaf key add`)", r.id, repo.display()),
        ));
    }
    if r.id == u.opened_by {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!("key {} is the one given to open {}: give another of its keys to remove this one (so that another is known to open it)", r.id, repo.display()),
        ));
    }
    if !force {
        // The key wal-push used last, lately: archive_command gives it still. Another key used
        // since means archive_command was moved on, and this one may go.
        let ids: Vec<&str> = u.records.iter().map(|x| x.id.as_str()).collect();
        let uses: Vec<(String, KeyUse)> = key_use::last(repo, &ids);
        let newest = uses.iter().max_by_key(|(_, k)| k.unix);
        if let Some((_, used)) = newest.filter(|(id, _)| *id == r.id) {
            let now = sheaf_core::time::now_ms() / 1000;
            if now - used.unix < RECENT_USE {
                return Err(Error::new(
                    ErrorKind::InvalidInput,
                    format!(
                        "key {} opened {} for wal-push on {} {} ago: the archive_command there (and the restore_command of clusters restored from it) still gives this key, and would fail once it is removed; give them another key first (docs/encryption.md), or --force to remove it now",
                        r.id,
                        repo.display(),
                        used.host,
                        sheaf_core::time::span(now - used.unix)
                    ),
                ));
            }
        }
    }
    repo.delete(&r.name())?;
    let _ = repo.delete(&key_use::name(&r.id));
    Ok(info(r, None))
}

/// How recent a use by wal-push makes `key remove` refuse without `--force`: a week.
const RECENT_USE: i64 = 7 * 86_400;

/// What a rotation did.
#[derive(Clone, Debug, Serialize)]
pub struct Rotation {
    /// The repository.
    pub repo: String,
    /// The generation everything written from now on uses.
    pub generation: u32,
    /// Key records written again.
    pub records: usize,
    /// Bytes written (the records).
    pub bytes_written: u64,
}

/// A new key ring generation for everything written from now on; every key's record is written
/// again with it (only their public halves are needed); nothing else is touched.
///
/// # Errors
/// The repository does not open; the key given is behind (a rotation cut short: use one that is
/// not); writing a record.
pub fn rotate(repo: &Place) -> Result<Rotation> {
    let u = opened(repo)?;
    // Rotating from a key that is behind would give a generation number another key has.
    u.check_current()?;
    let next = u.ring.rotated()?;
    // The opener's record first: if the rotation is cut short, this key can run it again.
    let mut order: Vec<&KeyRecord> = u.records.iter().collect();
    order.sort_by_key(|r| r.id != u.opened_by);
    let mut bytes_written = 0;
    let mut written = Vec::new();
    for r in order {
        let w = r.clone().wrap(&next)?;
        repo.put_key_record(&w, true)?;
        bytes_written += serde_json::to_vec_pretty(&w).map(|v| v.len() as u64).unwrap_or(0);
        written.push(w);
    }
    Ok(Rotation { repo: repo.display().to_string(), generation: next.generations(), records: written.len(), bytes_written })
}

/// Move a repository encrypted before key rings to them, in place: its one master key becomes the
/// ring's oldest entry, the secret given its first key; only that key record is written.
///
/// # Errors
/// Not encrypted, a ring already, the wrong secret; writing the record.
pub fn migrate(repo: &Place) -> Result<KeyInfo> {
    let keys = repo.keys().ok_or_else(|| {
        Error::new(ErrorKind::Key, format!("give the secret that opens {} (--passphrase-file, --encryption-key-file, --key-command or SHEAF_PASSPHRASE)", repo.display()))
    })?;
    if !repo.key_records()?.is_empty() {
        return Err(Error::new(ErrorKind::InvalidInput, format!("the repository {} has key rings already: nothing to migrate (`sheaf key list`)", repo.display())));
    }
    let block = single_kdf(repo)?.ok_or_else(|| not_encrypted(repo))?;
    keys.open(&block).map_err(|e| e.context(format!("repository {}", repo.display())))?;
    let ring = Ring::adopting(block.kdf, keys.own_master(&block.kdf)?)?;
    let record = KeyRecord::seal(keys, &ring, sheaf_core::time::now_ms() / 1000, &sheaf_core::host::who())?;
    repo.put_key_record(&record, false)?;
    Ok(info(&record, None))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use sheaf_core::codec::CodecSpec;
    use sheaf_core::LocalOnly;

    fn pass(p: &str) -> Arc<Keys> {
        Arc::new(Keys::from_passphrase(p.as_bytes().to_vec()).unwrap().with_argon2(64, 1, 1).unwrap())
    }

    type Repo = sheaf_core::repo::Repo<serde_json::Value>;

    fn place(d: &std::path::Path) -> Place {
        Place::at(d.to_str().unwrap(), &LocalOnly).unwrap()
    }

    /// The place `d` with `keys` made afresh, as another process would (keys keep the rings they
    /// opened).
    fn keyed(d: &std::path::Path, keys: &dyn Fn() -> Arc<Keys>) -> Place {
        place(d).with_keys(Some(keys()))
    }

    /// The repository at `d`, opened afresh with `keys` made afresh.
    fn at(d: &std::path::Path, keys: &dyn Fn() -> Arc<Keys>) -> Repo {
        keyed(d, keys).open().unwrap()
    }

    fn put(repo: &Repo, rel: &str, text: &str) {
        repo.put(rel, &mut text.as_bytes(), CodecSpec::default(), false, rel).unwrap();
    }

    fn get(repo: &Repo, rel: &str) -> Result<String> {
        repo.get_bytes(rel).map(|b| String::from_utf8(b).unwrap())
    }

    /// Every object but the key records: name and tag (a rewrite changes the tag).
    fn others(d: &std::path::Path) -> Vec<(String, String)> {
        place(d).list("").unwrap().into_iter().filter(|o| !o.name.starts_with("keys/")).map(|o| (o.name, o.tag)).collect()
    }

    /// A key operation on `d` with `keys`.
    fn with<T>(d: &std::path::Path, keys: &dyn Fn() -> Arc<Keys>, op: impl FnOnce(&Place) -> Result<T>) -> Result<T> {
        op(&keyed(d, keys))
    }

    fn generation_of(repo: &Repo, rel: &str) -> u32 {
        match sheaf_core::blob::blob_info(repo.open(rel).unwrap().as_ref()).unwrap().key_block.unwrap().kdf {
            Kdf::Ring { generation, .. } => generation,
            k => panic!("not a ring's: {k:?}"),
        }
    }

    #[test]
    fn keys_are_added_rotated_and_removed_without_rewriting_anything_else() {
        let top = tempfile::tempdir().unwrap();
        // A folder init makes, as sheaf init does.
        let d = &top.path().join("new");
        let (alice, bob) = (|| pass("alice: correct horse"), || Arc::new(Keys::from_key([0x42; 32])));
        keyed(d, &alice).init(&serde_json::json!({"system_identifier": "7"})).unwrap();
        put(&at(d, &alice), "wal/00000001/a.wal", "written under generation 1");
        let listed = with(d, &alice, list).unwrap();
        assert_eq!((listed.scheme, listed.generation, listed.keys.len()), (KeyScheme::Ring, 1, 1));
        assert!(listed.keys[0].this && listed.keys[0].kind == SecretKind::Passphrase);

        // Bob's key is added by alice; then it opens everything, what was written before too.
        let e = with(d, &alice, |p| add(p, &alice())).unwrap_err();
        assert!(e.message().contains("a key of") && e.message().contains("already"), "{e}");
        let b = with(d, &alice, |p| add(p, &bob())).unwrap();
        assert_eq!(b.kind, SecretKind::Key);
        assert_eq!(get(&at(d, &bob), "wal/00000001/a.wal").unwrap(), "written under generation 1");
        let e = keyed(d, &|| Arc::new(Keys::from_key([0x43; 32]))).open::<serde_json::Value>().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Key);
        assert!(e.message().contains("wrong key") && e.message().contains(&b.id), "names the keys: {e}");
        let e = keyed(d, &|| pass("mallory")).open::<serde_json::Value>().unwrap_err();
        assert!(e.message().contains("wrong passphrase"), "{e}");

        // A rotation by bob: only key records are written, whatever else the repository holds.
        for n in 0..20 {
            put(&at(d, &alice), &format!("wal/00000001/{n:02}.wal"), &"x".repeat(n * 1000));
        }
        let before = others(d);
        let r = with(d, &bob, rotate).unwrap();
        assert_eq!((r.generation, r.records), (2, 2));
        assert!(r.bytes_written < 2 * 2048, "two small records: {r:?}");
        assert_eq!(others(d), before, "nothing but key records rewritten");
        put(&at(d, &alice), "wal/00000001/b.wal", "written under generation 2");
        assert_eq!(generation_of(&at(d, &alice), "wal/00000001/b.wal"), 2);
        assert_eq!(generation_of(&at(d, &alice), "wal/00000001/a.wal"), 1, "kept its own");
        for k in [&alice as &dyn Fn() -> Arc<Keys>, &bob] {
            assert_eq!(get(&at(d, k), "wal/00000001/a.wal").unwrap(), "written under generation 1");
            assert_eq!(get(&at(d, k), "wal/00000001/b.wal").unwrap(), "written under generation 2");
        }

        // Removing: never the key given, never the last; a removed key opens nothing.
        let a_id = with(d, &bob, list).unwrap().keys.iter().find(|k| k.kind == SecretKind::Passphrase).unwrap().id.clone();
        let e = with(d, &alice, |p| remove(p, &a_id, false)).unwrap_err();
        assert!(e.message().contains("give another"), "{e}");
        assert!(with(d, &bob, |p| remove(p, "zz", false)).unwrap_err().message().contains("no key"));
        with(d, &bob, |p| remove(p, &a_id[..6], false)).unwrap();
        let e = keyed(d, &alice).open::<serde_json::Value>().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Key, "{e}");
        let e = with(d, &bob, |p| remove(p, &b.id, false)).unwrap_err();
        assert!(e.message().contains("last key"), "{e}");
        assert_eq!(get(&at(d, &bob), "wal/00000001/b.wal").unwrap(), "written under generation 2");
    }

    #[test]
    fn a_rotation_cut_short_is_read_through_and_mended_by_rotating_again() {
        let d = tempfile::tempdir().unwrap();
        let (alice, bob) = (|| pass("alice"), || pass("bob"));
        keyed(d.path(), &alice).init(&serde_json::json!({})).unwrap();
        with(d.path(), &alice, |p| add(p, &bob())).unwrap();
        put(&at(d.path(), &alice), "wal/00000001/a.wal", "one");
        // Cut short: alice's record reached generation 2, bob's did not.
        let u = keyed(d.path(), &alice).unlock().unwrap().unwrap();
        let next = u.ring.rotated().unwrap();
        let mine = u.records.iter().find(|r| r.id == u.opened_by).unwrap().clone();
        place(d.path()).put_key_record(&mine.clone().wrap(&next).unwrap(), true).unwrap();
        put(&at(d.path(), &alice), "wal/00000001/b.wal", "two");

        assert_eq!(get(&at(d.path(), &bob), "wal/00000001/a.wal").unwrap(), "one", "reads what its generation holds");
        let e = at(d.path(), &bob).put("wal/00000001/c.wal", &mut &b"x"[..], CodecSpec::default(), false, "c").unwrap_err();
        assert!(e.message().contains("cut short") && e.message().contains(&mine.id), "{e}");
        assert!(with(d.path(), &bob, rotate).unwrap_err().message().contains("cut short"));
        assert_eq!(with(d.path(), &alice, rotate).unwrap().generation, 3);
        put(&at(d.path(), &bob), "wal/00000001/c.wal", "three");
        for rel in ["a", "b", "c"] {
            get(&at(d.path(), &bob), &format!("wal/00000001/{rel}.wal")).unwrap();
        }
    }

    #[test]
    fn a_repository_from_before_key_rings_is_migrated_in_place() {
        let d = tempfile::tempdir().unwrap();
        let old = || pass("the one passphrase");
        keyed(d.path(), &old).init_without_ring(&serde_json::json!({"system_identifier": "7"})).unwrap();
        put(&at(d.path(), &old), "wal/00000001/a.wal", "from before");
        let l = list(&place(d.path())).unwrap();
        assert_eq!((l.scheme, l.keys[0].kind), (KeyScheme::Single, SecretKind::Passphrase));
        let e = with(d.path(), &old, |p| add(p, &pass("new"))).unwrap_err();
        assert!(e.message().contains("sheaf key migrate"), "{e}");
        assert!(with(d.path(), &|| pass("guess"), migrate).unwrap_err().message().contains("wrong passphrase"));

        let before = others(d.path());
        let k = with(d.path(), &old, migrate).unwrap();
        assert_eq!(others(d.path()), before, "only a key record written");
        assert!(with(d.path(), &old, migrate).unwrap_err().message().contains("already"));
        let new = || Arc::new(Keys::from_key([9; 32]));
        with(d.path(), &old, |p| add(p, &new())).unwrap();
        put(&at(d.path(), &new), "wal/00000001/b.wal", "from after");
        assert_eq!(generation_of(&at(d.path(), &new), "wal/00000001/b.wal"), 1);
        for keys in [&old as &dyn Fn() -> Arc<Keys>, &new] {
            assert_eq!(get(&at(d.path(), keys), "wal/00000001/a.wal").unwrap(), "from before");
            assert_eq!(get(&at(d.path(), keys), "wal/00000001/b.wal").unwrap(), "from after");
            get(&at(d.path(), keys), "repo.json").unwrap();
        }
        with(d.path(), &new, |p| remove(p, &k.id, false)).unwrap();
        assert!(keyed(d.path(), &old).open::<serde_json::Value>().is_err(), "the removed key no longer opens the repository");
    }
}
