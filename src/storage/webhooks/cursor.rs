//! A tenant's delivery cursors, one table file (`webhooks/cursors`): a 512-byte record per subscription, two checksummed slots written in turn (a torn or lost write leaves the other slot, one step behind: a delivery repeated, never one skipped), each record held by one process at a time (an OFD lock on its bytes). One file, so that the cursors moved between two `syncfs` rounds dirty a few of its pages, not a page and an inode each.
use crate::domain::{CommitId, ObjectId, WebhookId};
use crate::storage::disk::faults::{self, Op};
use sha2::{Digest, Sha256};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};

/// Bytes per slot; a record is shorter, padded with spaces.
const SLOT: usize = 256;
/// Bytes per subscription: two slots, one disk sector (a torn sector touches one record).
const RECORD: usize = 2 * SLOT;
/// The slots of a cursor file from before the table (`<id>.cursor`), read once to adopt it.
const LEGACY_SLOT: usize = 128;
/// The sequence of a removed subscription's slots: higher than any move a late holder can
/// still write, so the record stays removed.
const REMOVED: u64 = u64::MAX;

/// Where a subscription stands: every event of `through` and of the commits before it on
/// `main`'s first-parent line is delivered, and so is the integration file's event of
/// `partial` (the commit after `through`, which changed both files) when there is one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CursorPosition {
    pub through: CommitId,
    pub partial: Option<CommitId>,
}

impl CursorPosition {
    /// From the hex ids a move's bundle carries.
    pub fn parse(through: &str, partial: Option<&str>) -> Option<Self> {
        let id = |s: &str| ObjectId::parse(s).ok().map(CommitId);
        Some(Self {
            through: id(through)?,
            partial: match partial {
                Some(p) => Some(id(p)?),
                None => None,
            },
        })
    }

    pub fn at(commit: CommitId) -> Self {
        Self {
            through: commit,
            partial: None,
        }
    }

    /// A position on the proposals' records line (the second table): after step `step`,
    /// `None` before the first (written as forty zeros, which no commit is).
    pub fn after_step(step: Option<CommitId>) -> Self {
        Self::at(step.unwrap_or(CommitId(ObjectId::ZERO)))
    }

    /// The step a position of the second table is after (see [`CursorPosition::after_step`]).
    pub fn step(&self) -> Option<CommitId> {
        (self.through.0 != ObjectId::ZERO).then_some(self.through)
    }
}

/// A claimed cursor: its record in the table, locked for as long as this lives.
#[derive(Debug)]
pub struct DeliveryCursor {
    path: PathBuf,
    file: File,
    record: u64,
    id: WebhookId,
    seq: u64,
    position: CursorPosition,
}

/// A record as read: the newest slot whose checksum holds.
struct Found {
    seq: u64,
    id: WebhookId,
    position: CursorPosition,
}

impl Found {
    /// The live cursor of `id` (not a removed one's record).
    fn is_of(&self, id: &WebhookId) -> bool {
        &self.id == id && self.seq != REMOVED
    }
}

impl DeliveryCursor {
    /// The cursor of `id` in the table at `path`, locked; `None` while another holder has
    /// it; `NotFound` when the table holds none for `id`.
    pub(super) fn claim(path: &Path, id: &WebhookId) -> io::Result<Option<Self>> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        let record = find(&file, id)?.ok_or_else(|| not_found(id))?;
        if !lock(&file, record)? {
            return Ok(None);
        }
        // Read again under the lock: a removal and a creation may have reused the record.
        match read_record(&file, record)? {
            Some(found) if found.is_of(id) => Ok(Some(Self {
                path: path.to_owned(),
                file,
                record,
                id: id.clone(),
                seq: found.seq,
                position: found.position,
            })),
            _ => Err(not_found(id)),
        }
    }

    pub fn position(&self) -> CursorPosition {
        self.position
    }

    pub fn id(&self) -> &WebhookId {
        &self.id
    }

    /// Moves the cursor: the slot not holding the newest record is written, and synced
    /// with `fdatasync` when `sync` is given (else the caller makes it durable with a
    /// shared `syncfs` before it relies on it).
    /// `NotFound` once the subscription was removed (its record marked so): nothing is
    /// written, and the record stays removed whatever a move racing the removal wrote.
    pub(in crate::storage) fn advance(&mut self, to: CursorPosition, sync: bool) -> io::Result<()> {
        if read_record(&self.file, self.record)?.is_none_or(|found| !found.is_of(&self.id)) {
            return Err(not_found(&self.id));
        }
        let seq = self.seq + 1;
        let slot = slot(seq, &self.id, to);
        let at = self.record * RECORD as u64 + (seq % 2) * SLOT as u64;
        faults::check(Op::Write, &self.path)?;
        self.file.write_all_at(&slot, at)?;
        if sync {
            faults::check(Op::Fsync, &self.path)?;
            self.file.sync_data()?;
        }
        self.seq = seq;
        self.position = to;
        Ok(())
    }
}

/// Adds `id`'s cursor at `at` to the table at `path` (made when missing), synced: in a
/// record that is free (blank, or left by a subscription not in `live` and held by no
/// one), else at the end. Called under the subscriptions' lock.
pub(super) fn insert(
    path: &Path,
    id: &WebhookId,
    at: CursorPosition,
    live: &[WebhookId],
) -> io::Result<()> {
    let new = !path.exists();
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    let records = read_all(&file)?;
    let mut free = None;
    for (i, record) in records.iter().enumerate() {
        let unused = record
            .as_ref()
            .is_none_or(|f| f.seq == REMOVED || !live.contains(&f.id));
        // A holder still delivering a removed subscription keeps its record until it lets go.
        if unused && lock(&file, i as u64)? {
            free = Some(i as u64);
            break;
        }
    }
    let record = free.unwrap_or(records.len() as u64);
    let mut bytes = slot(0, id, at);
    bytes.extend(slot(1, id, at));
    file.write_all_at(&bytes, record * RECORD as u64)?;
    file.sync_data()?;
    if new {
        File::open(path.parent().expect("a file in a folder"))?.sync_all()?;
    }
    Ok(())
}

/// Marks `id`'s record removed in both slots (synced), if the table has one: a delivery
/// still under way that moves it afterwards writes a slot with a lower sequence, so the
/// record stays removed (and free once no one holds it).
pub(super) fn remove(path: &Path, id: &WebhookId) -> io::Result<()> {
    let file = match OpenOptions::new().read(true).write(true).open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if let Some((record, found)) = find_record(&file, id)? {
        let mut bytes = slot(REMOVED, id, found.position);
        bytes.extend(slot(REMOVED, id, found.position));
        file.write_all_at(&bytes, record * RECORD as u64)?;
        file.sync_data()?;
    }
    Ok(())
}

/// A new table at `path` (replacing any) holding `cursors`, synced into its folder.
pub(super) fn create(path: &Path, cursors: &[(WebhookId, CursorPosition)]) -> io::Result<()> {
    let dir = path.parent().expect("a file in a folder");
    let tmp = tempfile::Builder::new()
        .prefix(".planfiles-cursors-")
        .tempfile_in(dir)?;
    let mut bytes = Vec::with_capacity(cursors.len() * RECORD);
    for (id, at) in cursors {
        bytes.extend(slot(0, id, *at));
        bytes.extend(slot(1, id, *at));
    }
    tmp.as_file().write_all_at(&bytes, 0)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    File::open(dir)?.sync_all()
}

/// Where `id`'s cursor stands in the table at `path` (no lock taken).
pub(super) fn read(path: &Path, id: &WebhookId) -> io::Result<CursorPosition> {
    find_record(&File::open(path)?, id)?
        .map(|(_, found)| found.position)
        .ok_or_else(|| not_found(id))
}

/// Whether the table at `path` holds a cursor for `id`.
pub(super) fn holds(path: &Path, id: &WebhookId) -> bool {
    File::open(path).is_ok_and(|file| find(&file, id).is_ok_and(|r| r.is_some()))
}

/// The positions of the cursor files that came before the table (`<id>.cursor` in `dir`) of
/// the subscriptions in `live`, for the table's first creation. A file of a subscription
/// not in `live` is passed by; a torn one too, said in the log (its subscription alone is
/// then not delivered: its position is never guessed).
pub(super) fn legacy(
    dir: &Path,
    live: &[WebhookId],
) -> io::Result<Vec<(WebhookId, CursorPosition)>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(id) = name
            .to_str()
            .and_then(|n| n.strip_suffix(".cursor"))
            .and_then(WebhookId::parse)
            .filter(|id| live.contains(id))
        else {
            continue;
        };
        let mut buf = [0u8; 2 * LEGACY_SLOT];
        let n = File::open(entry.path())?.read_at(&mut buf, 0)?;
        buf[n..].fill(0);
        match buf
            .chunks(LEGACY_SLOT)
            .filter_map(parse_legacy_slot)
            .max_by_key(|(seq, _)| *seq)
        {
            Some((_, at)) => found.push((id, at)),
            None => {
                tracing::error!(file = %entry.path().display(), "an old webhook cursor file holds no valid record: its subscription is not delivered until it is made again")
            }
        }
    }
    Ok(found)
}

fn not_found(id: &WebhookId) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, format!("no cursor for {id}"))
}

/// Takes the write lock of record `record` (an OFD lock: per open file, across processes
/// and within one); false while another open file holds it.
fn lock(file: &File, record: u64) -> io::Result<bool> {
    let lock = libc::flock {
        l_type: libc::F_WRLCK as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: (record * RECORD as u64) as libc::off_t,
        l_len: RECORD as libc::off_t,
        l_pid: 0,
    };
    // SAFETY: the descriptor is open for the call, and `lock` outlives it.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &lock) } != 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EAGAIN | libc::EACCES) => Ok(false),
            _ => Err(e),
        };
    }
    Ok(true)
}

/// Every record of the table, in order (`None`: blank or both slots torn).
fn read_all(file: &File) -> io::Result<Vec<Option<Found>>> {
    let len = file.metadata()?.len() as usize;
    let mut buf = vec![0u8; len.div_ceil(RECORD) * RECORD];
    read_full(file, &mut buf, 0)?;
    Ok(buf.chunks(RECORD).map(newest).collect())
}

fn find(file: &File, id: &WebhookId) -> io::Result<Option<u64>> {
    Ok(find_record(file, id)?.map(|(i, _)| i))
}

/// The record holding `id`'s live cursor, and what it holds.
fn find_record(file: &File, id: &WebhookId) -> io::Result<Option<(u64, Found)>> {
    Ok(read_all(file)?
        .into_iter()
        .enumerate()
        .find_map(|(i, r)| r.filter(|f| f.is_of(id)).map(|f| (i as u64, f))))
}

fn read_record(file: &File, record: u64) -> io::Result<Option<Found>> {
    let mut buf = [0u8; RECORD];
    read_full(file, &mut buf, record * RECORD as u64)?;
    Ok(newest(&buf))
}

/// Fills `buf` from `offset` up to the end of the file (a short read is read on, not taken
/// for the end: a record read half would look blank); what lies past the end stays zero.
fn read_full(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf[done..].fill(0);
    Ok(())
}

/// The slot with the highest sequence among those whose checksum holds.
fn newest(record: &[u8]) -> Option<Found> {
    record
        .chunks(SLOT)
        .filter_map(parse_slot)
        .max_by_key(|f| f.seq)
}

fn slot(seq: u64, id: &WebhookId, at: CursorPosition) -> Vec<u8> {
    let body = format!(
        "{seq:016x} {id} {} {}",
        at.through,
        at.partial.map_or_else(|| "-".repeat(40), |c| c.to_string())
    );
    let mut record = format!("{body} {}", &hex(&Sha256::digest(body.as_bytes()))[..16]);
    record.push_str(&" ".repeat(SLOT - 1 - record.len()));
    record.push('\n');
    record.into_bytes()
}

/// The checksummed body of a slot, split on spaces.
fn checked(slot: &[u8]) -> Option<std::str::Split<'_, char>> {
    let text = std::str::from_utf8(slot).ok()?.trim_end();
    let (body, sum) = text.rsplit_once(' ')?;
    (hex(&Sha256::digest(body.as_bytes())).get(..16)? == sum).then(|| body.split(' '))
}

fn parse_slot(slot: &[u8]) -> Option<Found> {
    let mut parts = checked(slot)?;
    let seq = u64::from_str_radix(parts.next()?, 16).ok()?;
    let id = WebhookId::parse(parts.next()?)?;
    Some(Found {
        seq,
        id,
        position: position(parts.next()?, parts.next()?)?,
    })
}

fn parse_legacy_slot(slot: &[u8]) -> Option<(u64, CursorPosition)> {
    let mut parts = checked(slot)?;
    let seq = u64::from_str_radix(parts.next()?, 16).ok()?;
    Some((seq, position(parts.next()?, parts.next()?)?))
}

fn position(through: &str, partial: &str) -> Option<CursorPosition> {
    let partial = Some(partial).filter(|p| !p.bytes().all(|b| b == b'-'));
    CursorPosition::parse(through, partial)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests;
