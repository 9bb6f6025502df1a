//! `sheaf keep`: pin a backup against expire, release it, or list the pins
//! ([`sheaf_pg::repo::keep`]), in every repository given.

use sheaf_core::{Error, ErrorKind};
use sheaf_pg::repo::keep;
use sheaf_pg::repo::Repo;

use crate::args::KeepArgs;
use crate::context::Context;

/// Run it: in each repository given that can be read. A backup is pinned (or released) in every
/// repository that holds it; at least one must.
///
/// # Errors
/// No such finished backup anywhere, a date that is past or does not parse, the repositories'
/// errors.
pub fn run(ctx: &Context, a: KeepArgs) -> Result<(), Error> {
    let given = ctx.open_repos_to_write()?;
    let several = given.len() > 1;
    let mut repos: Vec<Repo> = Vec::new();
    for (place, opened) in given {
        match opened {
            Ok(r) => repos.push(r),
            Err(e) if several => eprintln!("sheaf: repository {} cannot be read and is left out: {e}", place.display()),
            Err(e) => return Err(e),
        }
    }
    if repos.is_empty() {
        return Err(Error::new(ErrorKind::Target, "none of the repositories given can be read"));
    }
    let now = sheaf_core::time::now_ms() / 1000;
    let Some(id) = &a.set else { return list(&a, &repos, now) };
    let mut json = Vec::new();
    let mut done = 0;
    for repo in &repos {
        let at = if several { format!(" in {}", repo.display()) } else { String::new() };
        // In whichever history holds it (after pg_upgrade, one per cluster).
        let repo = &sheaf_pg::repo::histories::with_backup(repo, id)?;
        let holds = sheaf_pg::repo::records::backups(repo)?.iter().any(|f| f.id() == id);
        if several && !holds {
            if !a.json {
                say!("{id} is not in {}: nothing to do there", repo.display());
            }
            continue;
        }
        done += 1;
        if a.release {
            let had = sheaf_pg::maintain::keep::release(repo, id)?;
            json.push(serde_json::json!({ "repo": repo.display(), "id": id, "released": had }));
            if !a.json {
                say!("{id}{at} {}", if had { "is no longer pinned: expire treats it by the policy" } else { "was not pinned" });
            }
            continue;
        }
        let until = a.until.as_deref().map(|t| sheaf_pg::restore::pitr::parse_time_as("--until", t)).transpose()?.map(|ms| ms.div_euclid(1000));
        let p = sheaf_pg::maintain::keep::pin(repo, id, until, now)?;
        let mut v = serde_json::to_value(&p).expect("pin serialises");
        v["repo"] = serde_json::json!(repo.display());
        json.push(v);
        if a.json {
            continue;
        }
        say!("{}{at} kept {}: expire leaves it, what it builds on and the WAL it needs to be consistent", p.id, p.until_text());
        if let Some(u) = p.locked_until {
            say!("and all of it is locked until {}: nobody can delete it before then", sheaf_core::time::utc(u));
        } else if let Some(l) = &repo.meta().lock {
            say!("note: a pin until released cannot lengthen the lock ({} days from each write): pin --until a date to lock what it keeps that long", l.days);
        }
    }
    if done == 0 {
        return Err(Error::new(ErrorKind::InvalidInput, format!("no backup {id} in any repository given (sheaf info lists them)")));
    }
    if a.json {
        // One repository: the pin itself, as before; several: one per repository.
        say!("{}", if several { serde_json::json!({ "repositories": json }) } else { json.pop().unwrap_or_default() });
    }
    Ok(())
}

/// The pins of each repository.
fn list(a: &KeepArgs, repos: &[Repo], now: i64) -> Result<(), Error> {
    let several = repos.len() > 1;
    let mut all = Vec::new();
    for repo in repos {
        // Every history's (after pg_upgrade, one per cluster).
        let mut pins = Vec::new();
        for h in sheaf_pg::repo::histories::all(repo)? {
            pins.extend(keep::pins(&h.repo)?);
        }
        if a.json {
            all.push(serde_json::json!({ "repo": repo.display(), "pins": pins }));
            continue;
        }
        if pins.is_empty() {
            say!("no backup is pinned in {} (sheaf keep --set ID pins one)", repo.display());
        }
        for p in &pins {
            let at = if several { format!(" in {}", repo.display()) } else { String::new() };
            say!("{}{at} kept {}{}", p.id, p.until_text(), if p.holds(now) { "" } else { " (ended: expire treats it by the policy)" });
        }
    }
    if a.json {
        let shown = if several {
            serde_json::json!({ "repositories": all })
        } else {
            all.pop().map(|mut v| v["pins"].take()).map(|p| serde_json::json!({ "pins": p })).unwrap_or_default()
        };
        say!("{shown}");
    }
    Ok(())
}
