//! The model served over FUSE: every call takes the state's lock, so calls are atomic with
//! respect to each other and to a power cut.

use std::ffi::{OsStr, OsString};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};

use crate::model::{Meta, Op, State};

/// How long the kernel may keep names and attributes; every change goes through here, so this
/// only saves lookups.
const TTL: Duration = Duration::from_secs(1);

pub(crate) struct Fs(pub(crate) Arc<Mutex<State>>);

impl Fs {
    /// The state, or EIO once the power is off.
    fn state(&self) -> Result<MutexGuard<'_, State>, Errno> {
        let s = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if s.off {
            Err(Errno::EIO)
        } else {
            Ok(s)
        }
    }
}

fn attr(s: &State, ino: u64) -> Option<FileAttr> {
    let m = s.meta.get(&ino)?;
    let size = if m.dir { 4096 } else { s.live.files.get(&ino).map_or(0, |c| c.len) };
    Some(FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size.div_ceil(512),
        atime: m.mtime,
        mtime: m.mtime,
        ctime: m.mtime,
        crtime: m.mtime,
        kind: if m.dir { FileType::Directory } else { FileType::RegularFile },
        perm: (m.mode & 0o7777) as u16,
        nlink: if m.dir { 2 } else { 1 },
        uid: m.uid,
        gid: m.gid,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    })
}

fn lookup_in(s: &State, dir: u64, name: &OsStr) -> Result<u64, Errno> {
    let d = s.live.dirs.get(&dir).ok_or(Errno::ENOTDIR)?;
    d.get(name).copied().ok_or(Errno::ENOENT)
}

fn touch(s: &mut State, ino: u64) {
    if let Some(m) = s.meta.get_mut(&ino) {
        m.mtime = SystemTime::now();
    }
}

/// Make `name` in `parent`: a folder or a regular file.
fn make(s: &mut State, req: &Request, parent: u64, name: &OsStr, mode: u32, umask: u32, dir: bool) -> Result<FileAttr, Errno> {
    if !s.live.dirs.contains_key(&parent) {
        return Err(Errno::ENOTDIR);
    }
    if lookup_in(s, parent, name).is_ok() {
        return Err(Errno::EEXIST);
    }
    // setgid folders hand their group down, as on ext4.
    let pm = s.meta.get(&parent).cloned().ok_or(Errno::ENOENT)?;
    let gid = if pm.mode & libc::S_ISGID != 0 { pm.gid } else { req.gid() };
    let ino = s.make(Meta { dir, mode: mode & !umask & 0o7777, uid: req.uid(), gid, mtime: SystemTime::now() });
    s.change(Op::Name { dir: parent, name: name.to_os_string(), ino: Some(ino) });
    touch(s, parent);
    attr(s, ino).ok_or(Errno::EIO)
}

fn remove(s: &mut State, parent: u64, name: &OsStr, dir: bool) -> Result<(), Errno> {
    let ino = lookup_in(s, parent, name)?;
    let is_dir = s.meta.get(&ino).is_some_and(|m| m.dir);
    match (dir, is_dir) {
        (true, false) => return Err(Errno::ENOTDIR),
        (false, true) => return Err(Errno::EISDIR),
        (true, true) if s.live.dirs.get(&ino).is_some_and(|d| !d.is_empty()) => return Err(Errno::ENOTEMPTY),
        _ => {}
    }
    s.change(Op::Name { dir: parent, name: name.to_os_string(), ino: None });
    touch(s, parent);
    Ok(())
}

fn reply_unit(r: Result<(), Errno>, reply: ReplyEmpty) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

impl Filesystem for Fs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let r = self.state().and_then(|s| lookup_in(&s, parent.0, name).and_then(|i| attr(&s, i).ok_or(Errno::ENOENT)));
        match r {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.state().and_then(|s| attr(&s, ino.0).ok_or(Errno::ENOENT)) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let r = self.state().and_then(|mut s| {
            let m = s.meta.get_mut(&ino.0).ok_or(Errno::ENOENT)?;
            if let Some(mode) = mode {
                m.mode = mode & 0o7777;
            }
            if let Some(uid) = uid {
                m.uid = uid;
            }
            if let Some(gid) = gid {
                m.gid = gid;
            }
            match mtime {
                Some(TimeOrNow::SpecificTime(t)) => m.mtime = t,
                Some(TimeOrNow::Now) => m.mtime = SystemTime::now(),
                None => {}
            }
            if let Some(len) = size {
                if m.dir {
                    return Err(Errno::EISDIR);
                }
                s.change(Op::SetLen { ino: ino.0, len });
                touch(&mut s, ino.0);
            }
            attr(&s, ino.0).ok_or(Errno::ENOENT)
        });
        match r {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, _rdev: u32, reply: ReplyEntry) {
        if mode & libc::S_IFMT != libc::S_IFREG {
            return reply.error(Errno::EPERM);
        }
        match self.state().and_then(|mut s| make(&mut s, req, parent.0, name, mode, umask, false)) {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        match self.state().and_then(|mut s| make(&mut s, req, parent.0, name, mode, umask, true)) {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_unit(self.state().and_then(|mut s| remove(&mut s, parent.0, name, false)), reply);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_unit(self.state().and_then(|mut s| remove(&mut s, parent.0, name, true)), reply);
    }

    fn rename(&self, _req: &Request, parent: INodeNo, name: &OsStr, newparent: INodeNo, newname: &OsStr, flags: RenameFlags, reply: ReplyEmpty) {
        let r = self.state().and_then(|mut s| {
            if flags.intersects(RenameFlags::RENAME_EXCHANGE | RenameFlags::RENAME_WHITEOUT) {
                return Err(Errno::EINVAL);
            }
            let ino = lookup_in(&s, parent.0, name)?;
            if !s.live.dirs.contains_key(&newparent.0) {
                return Err(Errno::ENOTDIR);
            }
            if let Ok(there) = lookup_in(&s, newparent.0, newname) {
                if there == ino {
                    return Ok(());
                }
                if flags.contains(RenameFlags::RENAME_NOREPLACE) {
                    return Err(Errno::EEXIST);
                }
                let (src_dir, dst_dir) = (s.meta[&ino].dir, s.meta.get(&there).is_some_and(|m| m.dir));
                match (src_dir, dst_dir) {
                    (false, true) => return Err(Errno::EISDIR),
                    (true, false) => return Err(Errno::ENOTDIR),
                    (true, true) if s.live.dirs.get(&there).is_some_and(|d| !d.is_empty()) => return Err(Errno::ENOTEMPTY),
                    _ => {}
                }
            }
            let (from, to): ((u64, OsString), (u64, OsString)) = ((parent.0, name.into()), (newparent.0, newname.into()));
            s.change(Op::Rename { from, to, ino, from_done: false, to_done: false });
            touch(&mut s, parent.0);
            touch(&mut s, newparent.0);
            Ok(())
        });
        reply_unit(r, reply);
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.state().and_then(|s| attr(&s, ino.0).ok_or(Errno::ENOENT)) {
            Ok(_) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn read(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, size: u32, _flags: OpenFlags, _lock: Option<LockOwner>, reply: ReplyData) {
        match self.state().and_then(|s| s.live.files.get(&ino.0).map(|c| c.read(offset, u64::from(size))).ok_or(Errno::EISDIR)) {
            Ok(d) => reply.data(&d),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let r = self.state().and_then(|mut s| {
            if !s.live.files.contains_key(&ino.0) {
                return Err(Errno::EISDIR);
            }
            s.change(Op::Write { ino: ino.0, off: offset, data: data.to_vec() });
            touch(&mut s, ino.0);
            Ok(())
        });
        match r {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(e),
        }
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock: LockOwner, reply: ReplyEmpty) {
        // close(2) makes nothing durable.
        reply_unit(self.state().map(drop), reply);
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        reply_unit(self.state().map(|mut s| s.sync_file(ino.0)), reply);
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let r = self.state().and_then(|s| {
            let d = s.live.dirs.get(&ino.0).ok_or(Errno::ENOTDIR)?;
            let mut all = vec![(ino.0, FileType::Directory, OsString::from(".")), (ino.0, FileType::Directory, OsString::from(".."))];
            for (name, i) in d {
                let kind = if s.meta.get(i).is_some_and(|m| m.dir) { FileType::Directory } else { FileType::RegularFile };
                all.push((*i, kind, name.clone()));
            }
            Ok(all)
        });
        match r {
            Ok(all) => {
                for (n, (i, kind, name)) in all.into_iter().enumerate().skip(offset as usize) {
                    if reply.add(INodeNo(i), n as u64 + 1, kind, name) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }

    fn fsyncdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        reply_unit(self.state().map(|mut s| s.sync_dir(ino.0)), reply);
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        // Room enough for any test: sheaf checks free space before it spools.
        reply.statfs(1 << 28, 1 << 28, 1 << 28, 1 << 24, 1 << 24, 4096, 255, 4096);
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        reply_unit(self.state().map(drop), reply);
    }

    fn create(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, _flags: i32, reply: ReplyCreate) {
        match self.state().and_then(|mut s| make(&mut s, req, parent.0, name, mode, umask, false)) {
            Ok(a) => reply.created(&TTL, &a, Generation(0), FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, length: u64, mode: i32, reply: ReplyEmpty) {
        if mode != 0 {
            return reply.error(Errno::EOPNOTSUPP);
        }
        let r = self.state().and_then(|mut s| {
            let len = s.live.files.get(&ino.0).ok_or(Errno::EISDIR)?.len;
            if offset + length > len {
                s.change(Op::SetLen { ino: ino.0, len: offset + length });
            }
            Ok(())
        });
        reply_unit(r, reply);
    }
}
