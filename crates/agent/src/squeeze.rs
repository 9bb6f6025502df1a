//! The agent's compressors, for a backup host that asks the agent to compress
//! (`--compress-on agent`, for a link slower than the codec): a connection's chunked reads are
//! cut into chunks that several threads read and compress at once, each with its own codec state,
//! and the chunks go out on the link in file order as they are ready.
//!
//! ```text
//!  request ──► chunk tasks ──► workers (read + compress) ──► done, reordered ──► CHUNK frames
//! ```
//! At most two chunks per worker are taken on before the oldest is sent, so memory stays at a few
//! chunks per connection whatever the request's length.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{bounded, unbounded, Receiver, Sender};
use sheaf_core::codec::CodecSpec;
use sheaf_core::format::ZERO_FRAME;
use sheaf_core::frame::{FrameEncoder, Payload};
use sheaf_core::{CodecKind, Result};

use crate::proto::ChunkHead;

struct Task {
    seq: u64,
    file: Arc<File>,
    offset: u64,
    len: usize,
}

struct Done {
    seq: u64,
    /// The [`crate::proto::CHUNK`] frame's payload (head and stored bytes), and the raw bytes read
    /// (fewer than asked: the file ended there).
    frame: io::Result<(Vec<u8>, usize)>,
    asked: usize,
}

/// A connection's compressors, for one codec.
pub(crate) struct Squeezer {
    codec: CodecSpec,
    tasks: Option<Sender<Task>>,
    done: Receiver<Done>,
    workers: Vec<JoinHandle<()>>,
}

impl Squeezer {
    /// `threads` compressors for `codec`.
    ///
    /// # Errors
    /// The codec's set-up.
    pub(crate) fn new(codec: CodecSpec, threads: usize) -> Result<Squeezer> {
        let threads = threads.max(1);
        let (tasks, rx) = bounded::<Task>(threads * 2);
        let (tx, done) = unbounded();
        let mut workers = Vec::with_capacity(threads);
        for _ in 0..threads {
            let encoder = FrameEncoder::new(codec)?;
            let (rx, tx) = (rx.clone(), tx.clone());
            workers.push(std::thread::spawn(move || work(encoder, codec, &rx, &tx)));
        }
        Ok(Squeezer { codec, tasks: Some(tasks), done, workers })
    }

    /// Its codec.
    pub(crate) fn codec(&self) -> CodecSpec {
        self.codec
    }

    /// Read `len` bytes of `file` from `offset` in chunks of `chunk`, compress them, and hand each
    /// chunk's frame to `sink` in file order; the raw bytes sent (fewer than `len`: the file
    /// ended). Nothing after a short chunk is sent, so what is sent has no gap even when the file
    /// grows meanwhile.
    ///
    /// # Errors
    /// A read failing (its message names nothing: the caller adds the path), `sink`'s.
    pub(crate) fn run(&mut self, file: &Arc<File>, offset: u64, len: u64, chunk: usize, mut sink: impl FnMut(&[u8]) -> io::Result<()>) -> io::Result<u64> {
        let tasks = self.tasks.as_ref().expect("tasks are open until drop");
        let limit = self.workers.len() * 2;
        let end = offset.saturating_add(len);
        let (mut next_at, mut next_seq, mut send_seq) = (offset, 0u64, 0u64);
        let mut ready: BTreeMap<u64, Done> = BTreeMap::new();
        let mut sent = 0u64;
        let mut stop: Option<io::Error> = None;
        let mut ended = false;
        loop {
            // Keep the workers busy, within the bound.
            while stop.is_none() && !ended && next_at < end && next_seq - send_seq < limit as u64 {
                let take = ((end - next_at) as usize).min(chunk);
                let task = Task { seq: next_seq, file: file.clone(), offset: next_at, len: take };
                if tasks.send(task).is_err() {
                    return Err(io::Error::other("the agent's compressors stopped"));
                }
                next_seq += 1;
                next_at += take as u64;
            }
            if send_seq == next_seq {
                break;
            }
            let d = self.done.recv().map_err(|_| io::Error::other("the agent's compressors stopped"))?;
            ready.insert(d.seq, d);
            while let Some(d) = ready.remove(&send_seq) {
                send_seq += 1;
                if stop.is_some() || ended {
                    continue; // Drained: the request is over.
                }
                match d.frame {
                    Err(e) => stop = Some(e),
                    Ok((frame, raw)) => {
                        if raw > 0 {
                            if let Err(e) = sink(&frame) {
                                stop = Some(e);
                                continue;
                            }
                            sent += raw as u64;
                        }
                        ended = raw < d.asked;
                    }
                }
            }
        }
        match stop {
            Some(e) => Err(e),
            None => Ok(sent),
        }
    }
}

impl Drop for Squeezer {
    fn drop(&mut self) {
        self.tasks = None;
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

fn work(mut encoder: FrameEncoder, codec: CodecSpec, rx: &Receiver<Task>, tx: &Sender<Done>) {
    let mut raw = Vec::new();
    let mut out = Vec::new();
    while let Ok(t) = rx.recv() {
        raw.resize(t.len, 0);
        out.resize(FrameEncoder::out_len(codec, t.len, false), 0);
        let frame = read_full(&t.file, &mut raw, t.offset).and_then(|n| {
            let (header, payload) = encoder.encode(0, t.offset, &raw[..n], &mut out).map_err(|e| io::Error::other(e.to_string()))?;
            let (codec, stored): (u8, &[u8]) = match payload {
                Payload::Zero => (ZERO_FRAME, &[]),
                Payload::Raw => (CodecKind::None as u8, &raw[..n]),
                Payload::Packed(k) => (header.codec, &out[..k]),
            };
            let head = ChunkHead { codec, raw_len: n as u32, raw_crc: header.raw_crc };
            let mut frame = Vec::with_capacity(ChunkHead::LEN + stored.len());
            frame.extend_from_slice(&head.encode());
            frame.extend_from_slice(stored);
            Ok((frame, n))
        });
        if tx.send(Done { seq: t.seq, frame, asked: t.len }).is_err() {
            break;
        }
    }
}

/// Fill `buf` from `offset`; fewer bytes only at the file's end.
fn read_full(f: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match f.read_at(&mut buf[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sheaf_core::codec::DecompressorSet;

    #[test]
    fn chunks_come_in_order_compressed_and_stop_at_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        // Text-like first MiB, zeros, then a short tail: 2.5 chunks of 1 MiB.
        let mut data: Vec<u8> = (0..(1u32 << 20)).map(|i| b"lineitem 1995-03-15 "[(i % 20) as usize]).collect();
        data.extend(std::iter::repeat_n(0u8, 1 << 20));
        data.extend((0..(512u32 << 10)).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8));
        std::fs::write(&path, &data).unwrap();
        let file = Arc::new(File::open(&path).unwrap());
        let mut s = Squeezer::new(CodecSpec::parse("zstd:low").unwrap(), 3).unwrap();
        let mut frames = Vec::new();
        let sent = s
            .run(&file, 0, 10 << 20, 1 << 20, |f| {
                frames.push(f.to_vec());
                Ok(())
            })
            .unwrap();
        assert_eq!(sent, data.len() as u64);
        assert_eq!(frames.len(), 3);
        let mut back = Vec::new();
        let mut dec = DecompressorSet::default();
        let mut codecs = Vec::new();
        for f in &frames {
            let (h, stored) = ChunkHead::decode(f).unwrap();
            codecs.push(h.codec);
            let mut raw = vec![0u8; h.raw_len as usize];
            match CodecKind::from_id(h.codec) {
                None => assert_eq!(h.codec, ZERO_FRAME),
                Some(CodecKind::None) => raw.copy_from_slice(stored),
                Some(k) => dec.decompress(k, stored, &mut raw).unwrap(),
            }
            assert_eq!(crc32c::crc32c(&raw), h.raw_crc);
            back.extend_from_slice(&raw);
        }
        assert_eq!(codecs, vec![CodecKind::Zstd as u8, ZERO_FRAME, CodecKind::Zstd as u8]);
        assert!(frames[0].len() < 64 << 10, "the text compresses");
        assert_eq!(back, data);
        // A range in the middle, and the same squeezer again.
        let mut n = 0;
        assert_eq!(
            s.run(&file, 1 << 20, 1 << 20, 256 << 10, |_| {
                n += 1;
                Ok(())
            })
            .unwrap(),
            1 << 20
        );
        assert_eq!(n, 4);
    }

    #[test]
    fn a_failing_sink_fails_the_read_and_the_squeezer_stays_usable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![7u8; 3 << 20]).unwrap();
        let file = Arc::new(File::open(&path).unwrap());
        let mut s = Squeezer::new(CodecSpec::parse("lz4").unwrap(), 2).unwrap();
        let mut calls = 0;
        let e = s.run(&file, 0, 3 << 20, 1 << 20, |_| {
            calls += 1;
            Err(io::Error::other("link down"))
        });
        assert_eq!(e.unwrap_err().to_string(), "link down");
        assert_eq!(calls, 1);
        assert_eq!(s.run(&file, 0, 3 << 20, 1 << 20, |_| Ok(())).unwrap(), 3 << 20);
    }
}
