//! `sheaf key`: list, add, remove and rotate the keys of an encrypted repository, and move one
//! from before key rings to them ([`sheaf_pg::maintain::keys`]).

use sheaf_core::Error;
use sheaf_pg::maintain::keys::{self, KeyInfo};

use crate::args::{KeyAction, KeyCommandArgs};
use crate::context::{load_keys, Context};

/// Run it on the repository given (the first, when several are).
///
/// # Errors
/// The repository's errors; the wrong key; a key that cannot be removed.
pub fn run(ctx: &Context, a: KeyCommandArgs) -> Result<(), Error> {
    if let KeyAction::Migrate(x) = &a.action {
        if !x.set.is_empty() {
            return migrate_set(ctx, x);
        }
    }
    let repo = ctx.repo()?;
    let shown = |k: &KeyInfo| format!("{} ({})", k.id, k.kind);
    match a.action {
        KeyAction::List(on) => {
            let list = keys::list(&repo)?;
            if on.json {
                say!("{}", serde_json::to_string_pretty(&list).expect("serialises"));
                return Ok(());
            }
            if list.scheme == sheaf_pg::maintain::keys::KeyScheme::Single {
                say!("{}: encrypted before key rings, with one {} (no key records); `sheaf key migrate` moves it to key rings in place", list.repo, list.keys[0].kind);
                return Ok(());
            }
            say!("{:<18} {:<10} {:<20} {:<24} generations", "key", "kind", "added (UTC)", "by");
            for k in &list.keys {
                say!("{:<18} {:<10} {:<20} {:<24} {}{}", k.id, k.kind, k.added, k.added_by, k.generations, if k.this { "  <- the key given" } else { "" });
            }
            let behind = list.keys.iter().filter(|k| k.generations < list.generation).count();
            say!(
                "{} key{}; what is written now uses key ring generation {}{}",
                list.keys.len(),
                if list.keys.len() == 1 { "" } else { "s" },
                list.generation,
                if behind > 0 { format!(" ({behind} key(s) behind it: a rotation was cut short; run `sheaf key rotate` again with an up-to-date key)") } else { String::new() }
            );
        }
        KeyAction::Add(x) => {
            let new = new_keys(&x.new)?.ok_or_else(|| Error::invalid("give the new key: --new-passphrase-file FILE, --new-key-file FILE or --new-key-command CMD"))?;
            let k = keys::add(&repo, &new)?;
            if x.on.json {
                say!("{}", serde_json::to_string_pretty(&k).expect("serialises"));
            } else {
                say!("added key {} to {}: it opens everything in it, older backups and WAL too", shown(&k), repo.display());
            }
        }
        KeyAction::Remove(x) => {
            let k = keys::remove(&repo, &x.key, x.force)?;
            if x.on.json {
                say!("{}", serde_json::to_string_pretty(&k).expect("serialises"));
            } else {
                say!("removed key {} from {}: it no longer opens the repository", shown(&k), repo.display());
                say!("if it may have leaked, run `sheaf key rotate` now: what it could read until now may have been copied, what is written after a rotation it cannot read");
            }
        }
        KeyAction::Rotate(on) => {
            let r = keys::rotate(&repo)?;
            if on.json {
                say!("{}", serde_json::to_string_pretty(&r).expect("serialises"));
            } else {
                say!(
                    "rotated {}: what is written from now on uses key ring generation {}; {} key record{} rewritten ({} bytes), no backup or WAL file touched",
                    r.repo,
                    r.generation,
                    r.records,
                    if r.records == 1 { "" } else { "s" },
                    r.bytes_written
                );
            }
        }
        KeyAction::Migrate(x) => {
            if x.new.given() {
                return Err(Error::invalid(
                    "--new-passphrase-file, --new-key-file and --new-key-command go with --set; a repository's keys change with `sheaf key add` and `remove`",
                ));
            }
            let k = keys::migrate(&repo)?;
            if x.on.json {
                say!("{}", serde_json::to_string_pretty(&k).expect("serialises"));
            } else {
                say!("moved {} to key rings: key {} opens it, and what is written from now on uses a new random data key", repo.display(), shown(&k));
                say!("add more keys with `sheaf key add`; what was written before stays readable with the secret given too (that would take rewriting it)");
            }
        }
    }
    Ok(())
}

/// `sheaf key migrate --set`: each stripe's key block written again in place, for the same secret
/// (moving an older set to a random data key) or a new one; then the set is opened with it.
fn migrate_set(ctx: &Context, x: &crate::args::repo::KeyMigrateArgs) -> Result<(), Error> {
    let keys =
        ctx.keys()?.ok_or_else(|| Error::new(sheaf_core::ErrorKind::Key, "give the set's secret (--passphrase-file, --encryption-key-file, --key-command or SHEAF_PASSPHRASE)"))?;
    let set = ctx.open_stripes(&x.set)?;
    let new = new_keys(&x.new)?.unwrap_or_else(|| keys.clone());
    let done = sheaf_core::set::rewrap(&set, &keys, &new)?;
    let locations: Vec<sheaf_core::Location> = set.stripes.iter().map(|s| s.location.clone()).collect();
    drop(set);
    sheaf_core::BackupSet::open_with(&locations, ctx.schemes()?, Some(&new)).map_err(|e| e.context("the set does not open after its key blocks were written (run it again)"))?;
    if x.on.json {
        say!("{}", serde_json::to_string_pretty(&done).expect("serialises"));
    } else {
        say!(
            "wrote the key block of {} stripe{} in place ({} from the older layout): the set opens with {}; nothing else was rewritten",
            done.stripes,
            if done.stripes == 1 { "" } else { "s" },
            done.from_layout_1,
            if std::sync::Arc::ptr_eq(&new, &keys) { "the same secret, sealing a random data key" } else { "the new secret only" }
        );
    }
    Ok(())
}

/// The new secret the flags give, if any.
fn new_keys(n: &crate::args::repo::NewKeyArgs) -> Result<Option<std::sync::Arc<sheaf_core::Keys>>, Error> {
    load_keys(n.new_key_file.clone(), n.new_passphrase_file.clone(), n.new_key_command.clone(), "--new-key-command")
}
