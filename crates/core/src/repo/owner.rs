//! Who may write into a repository on this host's filesystem: the user who owns it. What one user
//! writes into another's folders the owner cannot remove later (an `expire` that fails, and running
//! it again does not mend), and root writing into a folder another user controls can be led by a
//! link to write anywhere. Buckets have no owner to compare.

use std::path::Path;

use crate::error::{Error, ErrorKind};
use crate::storage::Store;

/// Why this process may not write into the repository whose root is `root` (a path of `store`'s),
/// shown as `shown`; `None`: it may (or the root is not made yet, or it is not on this host).
pub(super) fn refusal(store: &dyn Store, root: &str, shown: &str) -> Option<String> {
    if !store.capabilities().files {
        return None;
    }
    let root = Path::new(if root.is_empty() { "." } else { root });
    // Not made yet (init makes it, as ours), or gone: nothing to compare.
    let (owner, at) = crate::host::owner_of(root)?;
    let me = crate::host::effective_ids().0;
    if at != root || owner == me {
        return None;
    }
    let (owner_name, my_name) = (crate::host::user_name(owner), crate::host::user_name(me));
    let hazard = if me == 0 {
        format!("files root writes there {owner_name} could not remove later (expire would fail), and a link {owner_name} left in it could lead root to write anywhere")
    } else {
        format!("files {my_name} writes there {owner_name} could not remove later (expire would fail)")
    };
    Some(format!(
        "the repository {shown} belongs to {owner_name} (uid {owner}), and sheaf runs as {my_name} (uid {me}): {hazard}. Run sheaf as {owner_name} (sudo -u {owner_name} sheaf ...), the user PostgreSQL's archive_command runs as; or, if {my_name} is to own it, chown -R {my_name} {}",
        crate::text::shell_quote(shown),
    ))
}

/// `e`, a failure writing `full` (a path of the repository `shown`), with the fix when it was a
/// permission refused: the file, its owner, who sheaf runs as.
pub(super) fn denied_hint(full: &str, shown: &str, e: Error) -> Error {
    let denied = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<std::io::Error>()).is_some_and(|io| io.kind() == std::io::ErrorKind::PermissionDenied);
    if !denied {
        return e;
    }
    let me = crate::host::effective_ids().0;
    let my_name = crate::host::user_name(me);
    let hint = match crate::host::owner_of(Path::new(full)) {
        Some((uid, at)) if uid != me => {
            let owner = crate::host::user_name(uid);
            format!(
                "{} belongs to {owner} (uid {uid}), not to {my_name} (uid {me}), who runs sheaf: run sheaf as {owner} (sudo -u {owner} sheaf ...), so that every file in the repository is {owner}'s; for archive_command that is the user PostgreSQL runs as",
                at.display()
            )
        }
        Some((_, at)) => format!(
            "{} is {my_name}'s (uid {me}), but the repository {shown} is not writable by this user; for archive_command that is the user PostgreSQL runs as: give it write access (chmod u+w, or a group with write permission)",
            at.display()
        ),
        None => format!("the repository {shown} is not writable by this user ({my_name}, uid {me}); for archive_command that is the user PostgreSQL runs as: give it write access (chown -R, or a group with write permission)"),
    };
    Error::new(e.kind(), format!("{}: {hint}", e.message()))
}

/// The refusal as an error.
pub(super) fn denied(why: &str) -> Error {
    Error::new(ErrorKind::Denied, why.to_string())
}
