//! The tar archives of PostgreSQL's BASE_BACKUP, parsed as they stream: ustar headers (names of
//! up to 99 bytes, a directory's or link's with a trailing slash; sizes in octal, or base-256
//! past 8 GiB), file data padded to 512 bytes, and two zero blocks at the end. Nothing is held
//! but the header being read.

use sheaf_core::{Error, Result};

/// What a member is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
}

/// One member's header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Its path in the archive, without a trailing slash or a leading `./` (`""`: the root).
    pub name: String,
    /// File, directory or link.
    pub kind: Kind,
    /// Permission bits.
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Modification time, seconds.
    pub mtime: i64,
    /// Bytes of data that follow (files only).
    pub size: u64,
    /// A link's target.
    pub link: String,
}

/// What the parser found.
pub enum Event<'a> {
    /// A member begins.
    Member(&'a Member),
    /// Some of the current file's data, in order.
    Data(&'a [u8]),
    /// The current member is complete.
    End,
}

enum State {
    Header,
    Data,
    Padding,
    Done,
}

/// A tar stream being parsed.
pub struct TarStream {
    state: State,
    header: Box<[u8; 512]>,
    filled: usize,
    member: Option<Member>,
    left: u64,
}

impl Default for TarStream {
    fn default() -> Self {
        TarStream { state: State::Header, header: Box::new([0u8; 512]), filled: 0, member: None, left: 0 }
    }
}

fn field(h: &[u8]) -> &[u8] {
    let end = h.iter().position(|&b| b == 0).unwrap_or(h.len());
    &h[..end]
}

fn number(h: &[u8], what: &str) -> Result<u64> {
    if h.first().is_some_and(|b| b & 0x80 != 0) {
        // Base-256: the rest big-endian.
        return Ok(h[1..].iter().fold(u64::from(h[0] & 0x7f), |n, &b| (n << 8) | u64::from(b)));
    }
    let text = String::from_utf8_lossy(field(h)).trim().to_string();
    if text.is_empty() {
        return Ok(0);
    }
    u64::from_str_radix(&text, 8).map_err(|_| Error::corrupt(format!("tar header: {what} '{text}' is not an octal number")))
}

fn parse(h: &[u8; 512]) -> Result<Member> {
    let mut sum: u64 = h.iter().map(|&b| u64::from(b)).sum();
    sum -= h[148..156].iter().map(|&b| u64::from(b)).sum::<u64>();
    sum += 8 * u64::from(b' ');
    let stored = number(&h[148..156], "checksum")?;
    if stored != sum {
        return Err(Error::corrupt(format!("tar header checksum {stored} does not match its bytes ({sum})")));
    }
    let mut name = String::from_utf8_lossy(field(&h[0..100])).into_owned();
    if &h[257..262] == b"ustar" {
        let prefix = String::from_utf8_lossy(field(&h[345..500])).into_owned();
        if !prefix.is_empty() {
            name = format!("{prefix}/{name}");
        }
    }
    let kind = match h[156] {
        b'0' | 0 => Kind::File,
        b'5' => Kind::Dir,
        b'2' => Kind::Symlink,
        t => return Err(Error::corrupt(format!("tar member {name}: type '{}' is not a file, directory or link", t as char))),
    };
    while name.ends_with('/') {
        name.pop();
    }
    // PostgreSQL names a few members from the archive's root ("./pg_wal/archive_status").
    while let Some(rest) = name.strip_prefix("./") {
        name = rest.to_string();
    }
    if name == "." {
        name.clear();
    }
    Ok(Member {
        name,
        kind,
        mode: number(&h[100..108], "mode")? as u32 & 0o7777,
        uid: number(&h[108..116], "uid")? as u32,
        gid: number(&h[116..124], "gid")? as u32,
        size: if kind == Kind::File { number(&h[124..136], "size")? } else { 0 },
        mtime: number(&h[136..148], "mtime")? as i64,
        link: String::from_utf8_lossy(field(&h[157..257])).into_owned(),
    })
}

impl TarStream {
    /// Whether the end-of-archive blocks have been read.
    pub fn done(&self) -> bool {
        matches!(self.state, State::Done)
    }

    /// Parse `data`, the next bytes of the archive, handing each event to `on`.
    ///
    /// # Errors
    /// A damaged header; `on`'s errors.
    pub fn feed(&mut self, mut data: &[u8], on: &mut dyn FnMut(Event<'_>) -> Result<()>) -> Result<()> {
        while !data.is_empty() {
            match self.state {
                State::Done => return Ok(()),
                State::Header => {
                    let n = (512 - self.filled).min(data.len());
                    self.header[self.filled..self.filled + n].copy_from_slice(&data[..n]);
                    self.filled += n;
                    data = &data[n..];
                    if self.filled < 512 {
                        continue;
                    }
                    self.filled = 0;
                    if self.header.iter().all(|&b| b == 0) {
                        // The first of the two zero blocks: the archive ends.
                        self.state = State::Done;
                        continue;
                    }
                    let m = parse(&self.header)?;
                    on(Event::Member(&m))?;
                    self.left = m.size;
                    self.member = Some(m);
                    if self.left == 0 {
                        on(Event::End)?;
                        self.member = None;
                    } else {
                        self.state = State::Data;
                    }
                }
                State::Data => {
                    let n = (self.left.min(data.len() as u64)) as usize;
                    on(Event::Data(&data[..n]))?;
                    data = &data[n..];
                    self.left -= n as u64;
                    if self.left == 0 {
                        on(Event::End)?;
                        let size = self.member.take().map_or(0, |m| m.size);
                        self.left = (512 - size % 512) % 512;
                        self.state = if self.left == 0 { State::Header } else { State::Padding };
                    }
                }
                State::Padding => {
                    let n = (self.left.min(data.len() as u64)) as usize;
                    data = &data[n..];
                    self.left -= n as u64;
                    if self.left == 0 {
                        self.state = State::Header;
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ustar header as PostgreSQL writes one.
    fn header(name: &str, kind: u8, size: u64, link: &str) -> [u8; 512] {
        let mut h = [0u8; 512];
        h[..name.len()].copy_from_slice(name.as_bytes());
        h[100..107].copy_from_slice(b"0000600");
        h[108..115].copy_from_slice(b"0000144");
        h[116..123].copy_from_slice(b"0000144");
        h[124..135].copy_from_slice(format!("{size:011o}").as_bytes());
        h[136..147].copy_from_slice(b"14712345670");
        h[156] = kind;
        h[157..157 + link.len()].copy_from_slice(link.as_bytes());
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        h[148..156].copy_from_slice(b"        ");
        let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
        h[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
        h
    }

    #[test]
    fn members_and_data_come_whole_however_the_stream_is_cut() {
        let mut tar = Vec::new();
        tar.extend_from_slice(&header("base/", b'5', 0, ""));
        tar.extend_from_slice(&header("base/1/1259", b'0', 1000, ""));
        tar.extend((0..1000).map(|i| (i % 251) as u8));
        tar.extend(std::iter::repeat_n(0u8, 24));
        tar.extend_from_slice(&header("pg_tblspc/16385/", b'2', 0, "/srv/ts"));
        tar.extend_from_slice(&header("./empty", b'0', 0, ""));
        tar.extend([0u8; 1024]);
        for cut in [1usize, 7, 511, 512, 513, 4096, tar.len()] {
            let mut t = TarStream::default();
            let mut seen = Vec::new();
            let mut bytes = Vec::new();
            for piece in tar.chunks(cut) {
                t.feed(piece, &mut |e| {
                    match e {
                        Event::Member(m) => seen.push(m.clone()),
                        Event::Data(d) => bytes.extend_from_slice(d),
                        Event::End => {}
                    }
                    Ok(())
                })
                .unwrap();
            }
            assert!(t.done(), "cut {cut}");
            let names: Vec<(&str, Kind)> = seen.iter().map(|m| (m.name.as_str(), m.kind)).collect();
            assert_eq!(names, [("base", Kind::Dir), ("base/1/1259", Kind::File), ("pg_tblspc/16385", Kind::Symlink), ("empty", Kind::File)]);
            assert_eq!(seen[1].size, 1000);
            assert_eq!((seen[1].mode, seen[1].uid, seen[1].mtime), (0o600, 100, 0o14712345670));
            assert_eq!(seen[2].link, "/srv/ts");
            assert_eq!(bytes, (0..1000).map(|i| (i % 251) as u8).collect::<Vec<_>>());
        }
        // A flipped byte in a header is found.
        let mut bad = tar.clone();
        bad[3] ^= 1;
        assert!(TarStream::default().feed(&bad, &mut |_| Ok(())).is_err());
        // Base-256 sizes (past 8 GiB).
        assert_eq!(number(&[0x80, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0], "size").unwrap(), 2 << 32);
    }
}
