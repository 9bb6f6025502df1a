//! `sheaf copy`: backups copied into another repository ([`sheaf_pg::maintain::copy`]).

use sheaf_core::repo::Place;
use sheaf_core::size::format_size;
use sheaf_core::Error;
use sheaf_pg::maintain::copy::{copy, Which};
use sheaf_pg::repo::records::BackupRef;

use crate::args::CopyArgs;
use crate::context::{Context, KeepFlags};
use crate::output::plural;

/// Run it.
///
/// # Errors
/// As [`copy`]; no backup named (--set, --latest or --all).
pub fn run(ctx: &Context, a: CopyArgs) -> Result<(), Error> {
    let which = match (&a.set, a.latest, a.all) {
        (Some(r), _, _) => Which::Set(r.clone()),
        (None, true, _) => Which::Set(BackupRef::Latest),
        (None, false, true) => {
            let keep = ctx.retention(Some(&a.to_repo), &KeepFlags::default())?;
            Which::All((keep.keep_full.is_some() || keep.keep_within.is_some()).then_some(keep))
        }
        (None, false, false) => return Err(Error::invalid("say what to copy: --set ID (with the backups it builds on), --latest, or --all")),
    };
    let (_, from) = ctx.open_repos()?.into_iter().next().ok_or_else(|| Error::invalid("say which repository to copy from: --repo R"))?;
    let from = from?;
    // The target's own secret (one at most: clap refuses two), or the one given for --repo.
    let k = a.to_keys.clone();
    let to_keys = crate::context::other_keys(ctx, k.to_encryption_key_file, k.to_passphrase_file, k.to_key_command, "--to-key-command")?;
    let mut to = Place::at(&a.to_repo, ctx.schemes()?)?.with_keys(to_keys);
    if let Some(limit) = ctx.rate()? {
        to = to.throttled(&limit);
    }
    if to.display() == from.display() {
        return Err(Error::invalid(format!("--to-repo {} is the repository copied from: give another place", a.to_repo)));
    }
    let t0 = std::time::Instant::now();
    let done = copy(&from, &to, &which, ctx.interrupt.stop())?;
    let seconds = t0.elapsed().as_secs_f64();
    if a.json {
        let mut v = serde_json::to_value(&done).expect("report serialises");
        v["seconds"] = serde_json::json!(seconds);
        v["from"] = serde_json::json!(from.display());
        v["to"] = serde_json::json!(to.display());
        say!("{v}");
        return Ok(());
    }
    if done.created {
        say!("{} was empty: made a repository of cluster {} there", to.display(), from.root().meta().system_identifier);
    }
    for n in &done.histories_added {
        say!("recorded history {n} (after pg_upgrade) in {}", to.display());
    }
    if done.nothing() {
        say!(
            "nothing to copy: {} holds {} already ({})",
            to.display(),
            if done.already.len() == 1 { "it" } else { "them" },
            done.already.iter().map(|i| i.as_str()).collect::<Vec<_>>().join(", ")
        );
        return Ok(());
    }
    let ids = |v: &[sheaf_pg::repo::id::BackupId]| v.iter().map(|i| i.as_str()).collect::<Vec<_>>().join(", ");
    say!(
        "copied {} backup{}{} and {} WAL file{} to {}: {} objects, {} as stored, {} frames checked, in {seconds:.1} s ({:.1} MiB/s)",
        done.copied.len(),
        plural(done.copied.len()),
        if done.copied.is_empty() { String::new() } else { format!(" ({})", ids(&done.copied)) },
        done.wal_files,
        plural(done.wal_files as usize),
        to.display(),
        done.objects,
        format_size(done.bytes),
        done.frames,
        done.bytes as f64 / (1u64 << 20) as f64 / seconds.max(1e-9)
    );
    if !done.already.is_empty() {
        say!("held there already: {}", ids(&done.already));
    }
    if !done.left_out.is_empty() {
        say!("left out, the target's retention would not keep them: {}", ids(&done.left_out));
    }
    Ok(())
}
