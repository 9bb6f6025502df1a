//! `sheaf keep`: pin a backup against expire, release it, or list the pins
//! ([`sheaf_pg::repo::keep`]).

use sheaf_core::Error;
use sheaf_pg::repo::keep;

use crate::args::KeepArgs;
use crate::context::Context;

/// Run it.
///
/// # Errors
/// No such finished backup, a date that is past or does not parse, the repository's errors.
pub fn run(ctx: &Context, a: KeepArgs) -> Result<(), Error> {
    let (repo, meta) = ctx.open_repo()?;
    let now = sheaf_core::time::now_ms() / 1000;
    let Some(id) = &a.set else {
        let pins = keep::pins(&repo)?;
        if a.json {
            println!("{}", serde_json::json!({ "pins": pins }));
        } else if pins.is_empty() {
            println!("no backup is pinned in {} (sheaf keep --set ID pins one)", repo.display());
        }
        for p in pins.iter().filter(|_| !a.json) {
            println!("{} kept {}{}", p.id, p.until_text(), if p.holds(now) { "" } else { " (ended: expire treats it by the policy)" });
        }
        return Ok(());
    };
    if a.release {
        let had = keep::release(&repo, id)?;
        if a.json {
            println!("{}", serde_json::json!({ "id": id, "released": had }));
        } else if had {
            println!("{id} is no longer pinned: expire treats it by the policy");
        } else {
            println!("{id} was not pinned");
        }
        return Ok(());
    }
    let until = a.until.as_deref().map(|t| sheaf_pg::pitr::parse_time_as("--until", t)).transpose()?.map(|ms| ms.div_euclid(1000));
    let p = keep::pin(&repo, &meta, id, until, now)?;
    if a.json {
        println!("{}", serde_json::to_value(&p).expect("pin serialises"));
    } else {
        println!("{} kept {}: expire leaves it, what it builds on and the WAL it needs to be consistent", p.id, p.until_text());
        if let Some(u) = p.locked_until {
            println!("and all of it is locked until {}: nobody can delete it before then", sheaf_core::time::utc(u));
        } else if let Some(l) = &meta.lock {
            println!(
                "note: a pin until released cannot lengthen the lock ({} days from each write): pin --until a date to lock what it keeps that long",
                l.days
            );
        }
    }
    Ok(())
}
