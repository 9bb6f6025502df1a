//! Restored trees set aside until the bench ends, so that deleting them does not slow the
//! restores measured after them.

use std::path::{Path, PathBuf};

use sheaf_core::Result;

use super::event::Event;
use super::work::remove;

/// Restored trees, set aside until the bench ends instead of deleted between runs. Deleting tens
/// of thousands of files taxes every file created in the minutes after it on ext4 without a journal
/// (it skips inodes deleted in the last 60 s, or 360 s where their block is dirty again, for
/// each new inode): in one run, tar's restore of 100,000 small files took 7.4 to 31 s depending
/// on what had been deleted before it. Where space runs short they are deleted after all, with a
/// warning, as are peers' backups (few large files, cheap to delete).
#[derive(Default)]
pub(super) struct Trash {
    /// Trees set aside, and how many so far (names are unique).
    kept: Vec<PathBuf>,
    made: usize,
    /// The most space one restore took, and that the warning was given.
    largest: u64,
    warned: bool,
}

impl Trash {
    /// Before a restore into `dest`: room for it, free space permitting without deleting what
    /// earlier restores left; returns the free space, for [`Trash::set_aside`].
    pub(super) fn make_room(&mut self, dest: &Path, note: &dyn Fn(Event)) -> Result<Option<u64>> {
        remove(dest)?;
        let parent = dest.parent().unwrap_or(dest);
        let free = || sheaf_core::host::free_space(parent).map(|(_, f)| f);
        if !self.kept.is_empty() && free().is_some_and(|f| f < self.largest.saturating_add(self.largest / 2).saturating_add(1 << 30)) {
            for d in self.kept.drain(..) {
                remove(&d)?;
            }
            if !self.warned {
                self.warned = true;
                note(Event::Warning(&format!(
                    "{} is short of space: restored trees were deleted between runs, and restores soon after such deletes can be slower (ext4 without a journal)",
                    parent.display()
                )));
            }
        }
        Ok(free())
    }

    /// After a restore into `dest` (which had `before` bytes free): set it aside until the end.
    pub(super) fn set_aside(&mut self, dest: &Path, before: Option<u64>) -> Result<()> {
        let parent = dest.parent().unwrap_or(dest);
        if let (Some(b), Some((_, after))) = (before, sheaf_core::host::free_space(parent)) {
            self.largest = self.largest.max(b.saturating_sub(after));
        }
        if std::fs::symlink_metadata(dest).is_err() {
            return Ok(());
        }
        self.made += 1;
        let aside = parent.join(format!("restored-{}", self.made));
        match std::fs::rename(dest, &aside) {
            Ok(()) => self.kept.push(aside),
            Err(_) => remove(dest)?,
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restored_trees_wait_for_the_end_unless_space_runs_short() {
        let d = tempfile::tempdir().unwrap();
        let dest = d.path().join("restore");
        let mut t = Trash::default();
        let warnings = std::cell::RefCell::new(Vec::new());
        let note = |e: Event| {
            if let Event::Warning(w) = e {
                warnings.borrow_mut().push(w.to_string());
            }
        };
        for round in 1..=2 {
            let free = t.make_room(&dest, &note).unwrap();
            std::fs::create_dir_all(dest.join("sub")).unwrap();
            std::fs::write(dest.join("sub/f"), vec![7u8; 1 << 20]).unwrap();
            t.set_aside(&dest, free).unwrap();
            assert!(!dest.exists(), "round {round}: the name is free for the next restore");
            assert!(d.path().join(format!("restored-{round}/sub/f")).exists(), "round {round}: kept, not deleted");
        }
        assert!(warnings.borrow().is_empty());
        // Not room for another restore the size of the largest: what was kept goes, once said.
        t.largest = u64::MAX / 2;
        for _ in 0..2 {
            t.make_room(&dest, &note).unwrap();
            assert!(!d.path().join("restored-1").exists() && !d.path().join("restored-2").exists());
            std::fs::create_dir_all(&dest).unwrap();
            t.set_aside(&dest, None).unwrap();
        }
        assert_eq!(warnings.borrow().len(), 1, "{:?}", warnings.borrow());
        assert!(warnings.borrow()[0].contains("short of space"));
    }
}
