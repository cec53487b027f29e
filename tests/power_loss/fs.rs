//! `PowerFs`: an in-memory FUSE file system that keeps what was written apart from what was synced, and can cut the power.
//!
//! File data reaches the "disk" only when the file is fsynced. In strict mode a folder's
//! entries (files created, renamed or removed in it) reach it only when the folder is
//! fsynced; otherwise they are durable at once, as on a journalling file system. `syncfs` is
//! never seen: the kernel does not pass it to a FUSE daemon, which is the point. A power cut
//! keeps the durable state only: a folder's durable entries, each file's durable bytes.
//! That is the model LazyFS uses (the tool Jepsen uses for this).
use fuser::{
    Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo, LockOwner, OpenFlags,
    RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

const TTL: Duration = Duration::from_secs(1);
const ROOT: u64 = 1;

/// What survives a power cut: from the root, each folder's durable entries and each file's
/// durable bytes.
#[derive(Clone, Default)]
pub struct Image {
    nodes: HashMap<u64, Saved>,
}

#[derive(Clone)]
enum Saved {
    File(Arc<Vec<u8>>, u16),
    Dir(BTreeMap<OsString, u64>, u16),
}

impl Image {
    /// The image as a real folder tree at `to` (for the `git` CLI to check).
    pub fn write_to(&self, to: &Path) {
        self.write_node(ROOT, to);
    }

    fn write_node(&self, ino: u64, to: &Path) {
        match &self.nodes[&ino] {
            Saved::File(data, _) => std::fs::write(to, data.as_slice()).unwrap(),
            Saved::Dir(entries, _) => {
                std::fs::create_dir_all(to).unwrap();
                for (name, child) in entries {
                    self.write_node(*child, &to.join(name));
                }
            }
        }
    }
}

enum Kind {
    File {
        data: Vec<u8>,
        durable: Arc<Vec<u8>>,
    },
    Dir {
        entries: BTreeMap<OsString, u64>,
        /// Strict mode only: the entries as of the last fsync of this folder.
        durable: BTreeMap<OsString, u64>,
    },
}

struct Node {
    kind: Kind,
    perm: u16,
    nlink: u32,
    /// Open handles: a removed file stays readable and writable through them.
    opens: u32,
    /// The kernel's references (FUSE lookup count): each entry replied adds one, a `forget`
    /// takes them back. The kernel may open a node it looked up before it was renamed over,
    /// as it may on any file system, so the node stays until then.
    lookups: u64,
    mtime: SystemTime,
}

/// The file system's state. `ops` counts the operations that change anything (fsyncs
/// included); `cut_before` cuts the power just before the operation of that number.
pub struct Model {
    nodes: HashMap<u64, Node>,
    next: u64,
    strict: bool,
    ops: u64,
    cut_before: Option<u64>,
    cut: Option<Image>,
}

impl Model {
    pub fn from_image(image: &Image, strict: bool) -> Self {
        let mut nodes = HashMap::new();
        let mut nlinks: HashMap<u64, u32> = HashMap::new();
        for saved in image.nodes.values() {
            if let Saved::Dir(entries, _) = saved {
                for child in entries.values() {
                    *nlinks.entry(*child).or_default() += 1;
                }
            }
        }
        let now = SystemTime::now();
        for (ino, saved) in &image.nodes {
            let (kind, perm) = match saved {
                Saved::File(data, perm) => (
                    Kind::File {
                        data: data.to_vec(),
                        durable: data.clone(),
                    },
                    *perm,
                ),
                Saved::Dir(entries, perm) => (
                    Kind::Dir {
                        entries: entries.clone(),
                        durable: entries.clone(),
                    },
                    *perm,
                ),
            };
            let nlink = nlinks.get(ino).copied().unwrap_or(1);
            nodes.insert(
                *ino,
                Node {
                    kind,
                    perm,
                    nlink,
                    opens: 0,
                    lookups: 0,
                    mtime: now,
                },
            );
        }
        if nodes.is_empty() {
            nodes.insert(
                ROOT,
                Node {
                    kind: Kind::Dir {
                        entries: BTreeMap::new(),
                        durable: BTreeMap::new(),
                    },
                    perm: 0o755,
                    nlink: 2,
                    opens: 0,
                    lookups: 0,
                    mtime: now,
                },
            );
        }
        let next = nodes.keys().max().copied().unwrap_or(ROOT) + 1;
        Self {
            nodes,
            next,
            strict,
            ops: 0,
            cut_before: None,
            cut: None,
        }
    }

    /// The durable state now.
    fn image(&self) -> Image {
        let mut image = Image::default();
        let mut stack = vec![ROOT];
        while let Some(ino) = stack.pop() {
            if image.nodes.contains_key(&ino) {
                continue;
            }
            let Some(node) = self.nodes.get(&ino) else {
                continue;
            };
            let saved = match &node.kind {
                Kind::File { durable, .. } => Saved::File(durable.clone(), node.perm),
                Kind::Dir { entries, durable } => {
                    let kept = if self.strict { durable } else { entries };
                    // An entry whose node is gone (a file removed after its folder was
                    // synced in strict mode keeps its node; see `unlink`) is skipped.
                    let kept: BTreeMap<OsString, u64> = kept
                        .iter()
                        .filter(|(_, c)| self.nodes.contains_key(c))
                        .map(|(n, c)| (n.clone(), *c))
                        .collect();
                    stack.extend(kept.values());
                    Saved::Dir(kept, node.perm)
                }
            };
            image.nodes.insert(ino, saved);
        }
        image
    }

    /// Counts one operation that changes something; cuts the power first when it is the
    /// one asked for.
    fn op(&mut self) {
        self.ops += 1;
        if self.cut.is_none() && self.cut_before == Some(self.ops) {
            self.cut = Some(self.image());
        }
    }

    fn attr(&self, ino: u64) -> Option<FileAttr> {
        let node = self.nodes.get(&ino)?;
        let (kind, size) = match &node.kind {
            Kind::File { data, .. } => (FileType::RegularFile, data.len() as u64),
            Kind::Dir { entries, .. } => (FileType::Directory, entries.len() as u64),
        };
        Some(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: node.mtime,
            mtime: node.mtime,
            ctime: node.mtime,
            crtime: node.mtime,
            kind,
            perm: node.perm,
            nlink: node.nlink,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        })
    }

    fn entries(&mut self, dir: u64) -> Result<&mut BTreeMap<OsString, u64>, Errno> {
        match self.nodes.get_mut(&dir).map(|n| &mut n.kind) {
            Some(Kind::Dir { entries, .. }) => Ok(entries),
            Some(_) => Err(Errno::ENOTDIR),
            None => Err(Errno::ENOENT),
        }
    }

    fn lookup(&mut self, dir: u64, name: &OsStr) -> Result<u64, Errno> {
        self.entries(dir)?.get(name).copied().ok_or(Errno::ENOENT)
    }

    fn add(&mut self, dir: u64, name: &OsStr, kind: Kind, perm: u16) -> Result<u64, Errno> {
        if self.entries(dir)?.contains_key(name) {
            return Err(Errno::EEXIST);
        }
        self.op();
        let ino = self.next;
        self.next += 1;
        let nlink = if matches!(kind, Kind::Dir { .. }) {
            2
        } else {
            1
        };
        self.nodes.insert(
            ino,
            Node {
                kind,
                perm,
                nlink,
                opens: 0,
                lookups: 0,
                mtime: SystemTime::now(),
            },
        );
        self.entries(dir)?.insert(name.to_owned(), ino);
        Ok(ino)
    }

    /// Drops a node nothing can reach any more: no entry, no open handle, and (in strict
    /// mode) no durable entry either, which a power cut could bring back.
    fn forget_if_unreachable(&mut self, ino: u64) {
        let held = self
            .nodes
            .get(&ino)
            .is_some_and(|n| n.nlink > 0 || n.opens > 0 || n.lookups > 0);
        if held {
            return;
        }
        let durably = self.strict
            && self.nodes.values().any(|n| match &n.kind {
                Kind::Dir { durable, .. } => durable.values().any(|c| *c == ino),
                _ => false,
            });
        if !durably {
            self.nodes.remove(&ino);
        }
    }

    fn unlink(&mut self, dir: u64, name: &OsStr, want_dir: bool) -> Result<(), Errno> {
        let ino = self.lookup(dir, name)?;
        match (&self.nodes[&ino].kind, want_dir) {
            (Kind::Dir { entries, .. }, true) if !entries.is_empty() => {
                return Err(Errno::ENOTEMPTY)
            }
            (Kind::Dir { .. }, false) => return Err(Errno::EISDIR),
            (Kind::File { .. }, true) => return Err(Errno::ENOTDIR),
            _ => {}
        }
        self.op();
        self.entries(dir)?.remove(name);
        let node = self.nodes.get_mut(&ino).expect("looked up");
        node.nlink = if want_dir {
            0
        } else {
            node.nlink.saturating_sub(1)
        };
        self.forget_if_unreachable(ino);
        Ok(())
    }

    fn rename(
        &mut self,
        dir: u64,
        name: &OsStr,
        to_dir: u64,
        to_name: &OsStr,
        flags: RenameFlags,
    ) -> Result<(), Errno> {
        if flags.contains(RenameFlags::RENAME_EXCHANGE)
            || flags.contains(RenameFlags::RENAME_WHITEOUT)
        {
            return Err(Errno::EINVAL);
        }
        let ino = self.lookup(dir, name)?;
        let replaced = self.entries(to_dir)?.get(to_name).copied();
        if let Some(old) = replaced {
            if old == ino {
                return Ok(());
            }
            if flags.contains(RenameFlags::RENAME_NOREPLACE) {
                return Err(Errno::EEXIST);
            }
            if let Kind::Dir { entries, .. } = &self.nodes[&old].kind {
                if !entries.is_empty() {
                    return Err(Errno::ENOTEMPTY);
                }
            }
        }
        self.op();
        self.entries(dir)?.remove(name);
        self.entries(to_dir)?.insert(to_name.to_owned(), ino);
        if let Some(old) = replaced {
            let node = self.nodes.get_mut(&old).expect("an entry");
            node.nlink = node.nlink.saturating_sub(1);
            if matches!(node.kind, Kind::Dir { .. }) {
                node.nlink = 0;
            }
            self.forget_if_unreachable(old);
        }
        Ok(())
    }

    fn write(&mut self, ino: u64, offset: u64, bytes: &[u8]) -> Result<u32, Errno> {
        self.op();
        let node = self.nodes.get_mut(&ino).ok_or(Errno::ENOENT)?;
        let Kind::File { data, .. } = &mut node.kind else {
            return Err(Errno::EISDIR);
        };
        let end = offset as usize + bytes.len();
        if data.len() < end {
            data.resize(end, 0);
        }
        data[offset as usize..end].copy_from_slice(bytes);
        node.mtime = SystemTime::now();
        Ok(bytes.len() as u32)
    }

    fn fsync(&mut self, ino: u64) -> Result<(), Errno> {
        self.op();
        let strict = self.strict;
        let node = self.nodes.get_mut(&ino).ok_or(Errno::ENOENT)?;
        match &mut node.kind {
            Kind::File { data, durable } => *durable = Arc::new(data.clone()),
            Kind::Dir { entries, durable } if strict => *durable = entries.clone(),
            Kind::Dir { .. } => {}
        }
        Ok(())
    }
}

/// The mounted file system: a handle on the model, shared with the test.
#[derive(Clone)]
pub struct PowerFs(pub Arc<Mutex<Model>>);

impl PowerFs {
    pub fn new(image: &Image, strict: bool) -> Self {
        Self(Arc::new(Mutex::new(Model::from_image(image, strict))))
    }

    fn model(&self) -> MutexGuard<'_, Model> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Cuts the power now: what is durable at this moment is what survives. Later
    /// operations still run (on the page cache, as it were) but are not in the image.
    pub fn cut_now(&self) -> Image {
        let mut model = self.model();
        if model.cut.is_none() {
            model.cut = Some(model.image());
        }
        model.cut.clone().expect("set")
    }

    /// Cuts the power just before operation `n` (counted from now) runs.
    pub fn cut_before(&self, n: u64) {
        let mut model = self.model();
        model.cut_before = Some(model.ops + n);
    }

    /// The image of the cut, if the power was cut.
    pub fn taken(&self) -> Option<Image> {
        self.model().cut.clone()
    }

    /// Operations that changed something so far.
    pub fn ops(&self) -> u64 {
        self.model().ops
    }

    /// The durable state now, without cutting.
    pub fn durable(&self) -> Image {
        self.model().image()
    }
}

/// Replies with node `ino`'s entry, which the kernel then holds until it forgets it.
fn entry(reply: ReplyEntry, m: &mut Model, ino: u64) {
    match m.attr(ino) {
        Some(attr) => {
            m.nodes.get_mut(&ino).expect("has attributes").lookups += 1;
            reply.entry(&TTL, &attr, Generation(0))
        }
        None => reply.error(Errno::ENOENT),
    }
}

fn empty(reply: ReplyEmpty, result: Result<(), Errno>) {
    match result {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

impl fuser::Filesystem for PowerFs {
    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        let mut m = self.model();
        if let Some(node) = m.nodes.get_mut(&ino.0) {
            node.lookups = node.lookups.saturating_sub(nlookup);
        }
        m.forget_if_unreachable(ino.0);
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let mut m = self.model();
        match m.lookup(parent.0, name) {
            Ok(ino) => entry(reply, &mut m, ino),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.model().attr(ino.0) {
            Some(attr) => reply.attr(&TTL, &attr),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
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
        let mut m = self.model();
        if size.is_some() {
            m.op();
        }
        let Some(node) = m.nodes.get_mut(&ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        if let Some(mode) = mode {
            node.perm = (mode & 0o7777) as u16;
        }
        if let (Some(size), Kind::File { data, .. }) = (size, &mut node.kind) {
            data.resize(size as usize, 0);
        }
        match mtime {
            Some(TimeOrNow::SpecificTime(t)) => node.mtime = t,
            Some(TimeOrNow::Now) => node.mtime = SystemTime::now(),
            None => {}
        }
        let attr = m.attr(ino.0).expect("present");
        reply.attr(&TTL, &attr);
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let mut m = self.model();
        let kind = Kind::Dir {
            entries: BTreeMap::new(),
            durable: BTreeMap::new(),
        };
        match m.add(parent.0, name, kind, (mode & !umask & 0o7777) as u16) {
            Ok(ino) => {
                if let Some(p) = m.nodes.get_mut(&parent.0) {
                    p.nlink += 1;
                }
                entry(reply, &mut m, ino)
            }
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(reply, self.model().unlink(parent.0, name, false))
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(reply, self.model().unlink(parent.0, name, true))
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        empty(
            reply,
            self.model()
                .rename(parent.0, name, newparent.0, newname, flags),
        )
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let mut m = self.model();
        let exists = m.entries(newparent.0).map(|e| e.contains_key(newname));
        match exists {
            Ok(false) => {}
            Ok(true) => return reply.error(Errno::EEXIST),
            Err(e) => return reply.error(e),
        }
        if !matches!(
            m.nodes.get(&ino.0).map(|n| &n.kind),
            Some(Kind::File { .. })
        ) {
            return reply.error(Errno::EPERM);
        }
        m.op();
        m.entries(newparent.0)
            .expect("checked")
            .insert(newname.to_owned(), ino.0);
        m.nodes.get_mut(&ino.0).expect("checked").nlink += 1;
        entry(reply, &mut m, ino.0)
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.model().nodes.get_mut(&ino.0) {
            Some(node) => {
                node.opens += 1;
                reply.opened(FileHandle(0), FopenFlags::empty())
            }
            None => reply.error(Errno::ENOENT),
        }
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let mut m = self.model();
        if let Some(node) = m.nodes.get_mut(&ino.0) {
            node.opens = node.opens.saturating_sub(1);
        }
        m.forget_if_unreachable(ino.0);
        reply.ok()
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let m = self.model();
        match m.nodes.get(&ino.0).map(|n| &n.kind) {
            Some(Kind::File { data, .. }) => {
                let start = (offset as usize).min(data.len());
                let end = (start + size as usize).min(data.len());
                reply.data(&data[start..end])
            }
            Some(_) => reply.error(Errno::EISDIR),
            None => reply.error(Errno::ENOENT),
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
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match self.model().write(ino.0, offset, data) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok()
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        empty(reply, self.model().fsync(ino.0))
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let mut m = self.model();
        let listed: Vec<(u64, FileType, OsString)> = match m.entries(ino.0) {
            Ok(entries) => entries
                .iter()
                .map(|(name, child)| (*child, FileType::RegularFile, name.clone()))
                .collect(),
            Err(e) => return reply.error(e),
        };
        let mut all = vec![
            (ino.0, FileType::Directory, OsString::from(".")),
            (ino.0, FileType::Directory, OsString::from("..")),
        ];
        for (child, _, name) in listed {
            let kind = match m.nodes.get(&child).map(|n| &n.kind) {
                Some(Kind::Dir { .. }) => FileType::Directory,
                _ => FileType::RegularFile,
            };
            all.push((child, kind, name));
        }
        for (i, (child, kind, name)) in all.into_iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(child), (i + 1) as u64, kind, name) {
                break;
            }
        }
        reply.ok()
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        empty(reply, self.model().fsync(ino.0))
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        reply.statfs(1 << 24, 1 << 23, 1 << 23, 1 << 20, 1 << 19, 4096, 255, 4096)
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        reply.ok()
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let mut m = self.model();
        let existing = m.lookup(parent.0, name).ok();
        let ino = match existing {
            Some(_) if flags & libc::O_EXCL != 0 => return reply.error(Errno::EEXIST),
            Some(ino) => ino,
            None => {
                let kind = Kind::File {
                    data: Vec::new(),
                    durable: Arc::default(),
                };
                match m.add(parent.0, name, kind, (mode & !umask & 0o7777) as u16) {
                    Ok(ino) => ino,
                    Err(e) => return reply.error(e),
                }
            }
        };
        if flags & libc::O_TRUNC != 0 {
            m.op();
            if let Some(Node {
                kind: Kind::File { data, .. },
                ..
            }) = m.nodes.get_mut(&ino)
            {
                data.clear();
            }
        }
        let node = m.nodes.get_mut(&ino).expect("present");
        node.opens += 1;
        node.lookups += 1;
        let attr = m.attr(ino).expect("present");
        reply.created(
            &TTL,
            &attr,
            Generation(0),
            FileHandle(0),
            FopenFlags::empty(),
        )
    }
}
