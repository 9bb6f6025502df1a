//! What reading each file came to ([`Outcomes`]): 9 bytes per entry, written where the entry's id
//! says.

use crate::error::Result;
use std::fs::File;
use std::os::unix::fs::FileExt;

use super::*;

/// What reading a file came to, as [`Outcomes`] keeps it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Outcome {
    /// Bytes read.
    pub(crate) size: u64,
    /// It vanished before it was read.
    pub(crate) vanished: bool,
    /// It changed (size or time) or shrank while read.
    pub(crate) changed: bool,
}

const OUTCOME_LEN: u64 = 9;
/// A record's flag byte: set for every record written (a record never written reads as zeros).
const READ: u8 = 1;

/// Outcomes by entry id, in a file where record `id` lies at `id × 9`: readers write theirs as
/// they finish, in any order and from any thread, and the end of the backup reads them in id
/// order beside the entries. An entry no reader read (a directory, a file whose bytes came
/// another way) has no record.
pub(crate) struct Outcomes {
    file: File,
}

impl Outcomes {
    /// An empty file of outcomes.
    ///
    /// # Errors
    /// No temporary file can be made.
    pub(crate) fn new() -> Result<Self> {
        Ok(Outcomes { file: temp()? })
    }

    /// Write the outcomes of `recs` (ids ascending); ids that follow each other go in one write.
    ///
    /// # Errors
    /// The temporary file cannot be written.
    pub(crate) fn write(&self, recs: &mut Vec<(u32, Outcome)>) -> Result<()> {
        recs.sort_unstable_by_key(|r| r.0);
        let mut buf = Vec::with_capacity(recs.len() * OUTCOME_LEN as usize);
        let mut i = 0;
        while i < recs.len() {
            let first = recs[i].0;
            buf.clear();
            let mut j = i;
            while j < recs.len() && recs[j].0 == first + (j - i) as u32 {
                buf.extend_from_slice(&recs[j].1.size.to_le_bytes());
                buf.push(READ | if recs[j].1.vanished { 2 } else { 0 } | if recs[j].1.changed { 4 } else { 0 });
                j += 1;
            }
            self.file.write_all_at(&buf, u64::from(first) * OUTCOME_LEN).map_err(|e| io_err("cannot write what reading the files came to", e))?;
            i = j;
        }
        recs.clear();
        Ok(())
    }

    /// The outcome of entry `id`, if a reader recorded one.
    ///
    /// # Errors
    /// The temporary file cannot be read.
    pub(crate) fn get(&self, id: u32) -> Result<Option<Outcome>> {
        let mut b = [0u8; OUTCOME_LEN as usize];
        let n = read_at_most(&self.file, &mut b, u64::from(id) * OUTCOME_LEN)?;
        Ok(decode_outcome(&b[..n]))
    }

    /// The outcomes of entries `0..count`, in order.
    pub(crate) fn in_order(&self, count: u64) -> OutcomeReader<'_> {
        OutcomeReader { file: &self.file, next: 0, count, buf: Vec::new(), at: 0, base: 0 }
    }
}

fn decode_outcome(b: &[u8]) -> Option<Outcome> {
    if b.len() < OUTCOME_LEN as usize || b[8] & READ == 0 {
        return None;
    }
    Some(Outcome { size: u64::from_le_bytes(le(b, 0)), vanished: b[8] & 2 != 0, changed: b[8] & 4 != 0 })
}

/// [`Outcomes::in_order`].
pub(crate) struct OutcomeReader<'a> {
    file: &'a File,
    next: u64,
    count: u64,
    buf: Vec<u8>,
    /// Where in `buf` record `next` starts.
    at: usize,
    /// The id of `buf`'s first record.
    base: u64,
}

impl OutcomeReader<'_> {
    /// The outcome of the next entry (None: no reader recorded one), or None past the end.
    ///
    /// # Errors
    /// The temporary file cannot be read.
    pub(crate) fn next_outcome(&mut self) -> Result<Option<Option<Outcome>>> {
        if self.next >= self.count {
            return Ok(None);
        }
        if self.at + OUTCOME_LEN as usize > self.buf.len() {
            const RECORDS: u64 = 1 << 14;
            let n = RECORDS.min(self.count - self.next) as usize * OUTCOME_LEN as usize;
            self.buf.resize(n, 0);
            let got = read_at_most(self.file, &mut self.buf, self.next * OUTCOME_LEN)?;
            // Past the last record written the file ends: those entries have none.
            self.buf[got..].fill(0);
            (self.at, self.base) = (0, self.next);
        }
        debug_assert_eq!(self.base + (self.at as u64 / OUTCOME_LEN), self.next);
        let o = decode_outcome(&self.buf[self.at..self.at + OUTCOME_LEN as usize]);
        self.at += OUTCOME_LEN as usize;
        self.next += 1;
        Ok(Some(o))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_are_found_by_id_whoever_wrote_them_and_whenever() {
        let o = Outcomes::new().unwrap();
        let at = |size, vanished| Outcome { size, vanished, changed: size == 40 };
        // Two readers, interleaved ids, out of order; entry 2 and 6 never read.
        o.write(&mut vec![(5, at(50, false)), (3, at(30, true)), (4, at(40, false))]).unwrap();
        o.write(&mut vec![(1, at(10, false)), (0, at(0, false))]).unwrap();
        assert_eq!(o.get(3).unwrap(), Some(at(30, true)));
        assert_eq!(o.get(2).unwrap(), None);
        assert_eq!(o.get(99).unwrap(), None, "past the end: none");
        let mut r = o.in_order(7);
        let mut got = Vec::new();
        while let Some(x) = r.next_outcome().unwrap() {
            got.push(x);
        }
        assert_eq!(got, vec![Some(at(0, false)), Some(at(10, false)), None, Some(at(30, true)), Some(at(40, false)), Some(at(50, false)), None]);
    }
}
