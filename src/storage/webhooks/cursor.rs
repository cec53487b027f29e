//! A subscription's delivery cursor: two checksummed slots written in turn, each write one `fdatasync` (a torn or lost write leaves the other slot, one step behind: a delivery repeated, never one skipped), held by one process at a time (an OFD lock).
use crate::domain::{CommitId, ObjectId};
use sha2::{Digest, Sha256};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::FileExt as _;
use std::path::Path;

/// Bytes per slot; a record is shorter, padded with spaces.
const SLOT: usize = 128;

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
}

/// A claimed cursor: its file, locked for as long as this lives.
#[derive(Debug)]
pub struct DeliveryCursor {
    file: File,
    seq: u64,
    position: CursorPosition,
}

impl DeliveryCursor {
    /// The cursor at `path`, locked; `None` while another holder has it.
    pub(super) fn claim(path: &Path) -> io::Result<Option<Self>> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        let lock = libc::flock {
            l_type: libc::F_WRLCK as libc::c_short,
            l_whence: libc::SEEK_SET as libc::c_short,
            l_start: 0,
            l_len: 0,
            l_pid: 0,
        };
        // SAFETY: the descriptor is open for the call, and `lock` outlives it.
        if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &lock) } != 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN | libc::EACCES) => Ok(None),
                _ => Err(e),
            };
        }
        let (seq, position) = newest(&file)?;
        Ok(Some(Self {
            file,
            seq,
            position,
        }))
    }

    pub fn position(&self) -> CursorPosition {
        self.position
    }

    /// Moves the cursor: the slot not holding the newest record is written, and synced
    /// with `fdatasync` unless `sync` is given (the caller then makes it durable with a
    /// shared `syncfs` before it relies on it).
    pub(in crate::storage) fn advance(&mut self, to: CursorPosition, sync: bool) -> io::Result<()> {
        let seq = self.seq + 1;
        write_slot(&self.file, seq, to)?;
        if sync {
            self.file.sync_data()?;
        }
        self.seq = seq;
        self.position = to;
        Ok(())
    }
}

/// A new cursor file at `path` (replacing any), both slots written, synced into its folder.
pub(super) fn create(path: &Path, at: CursorPosition) -> io::Result<()> {
    let dir = path.parent().expect("a file in a folder");
    let tmp = tempfile::Builder::new()
        .prefix(".planfiles-cursor-")
        .tempfile_in(dir)?;
    write_slot(tmp.as_file(), 0, at)?;
    write_slot(tmp.as_file(), 1, at)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    File::open(dir)?.sync_all()
}

/// The position recorded at `path` (no lock taken).
pub(super) fn read(path: &Path) -> io::Result<CursorPosition> {
    Ok(newest(&File::open(path)?)?.1)
}

fn write_slot(file: &File, seq: u64, at: CursorPosition) -> io::Result<()> {
    let body = format!(
        "{seq:016x} {} {}",
        at.through,
        at.partial.map_or_else(|| "-".repeat(40), |c| c.to_string())
    );
    let mut record = format!("{body} {}", &hex(&Sha256::digest(body.as_bytes()))[..16]);
    record.push_str(&" ".repeat(SLOT - 1 - record.len()));
    record.push('\n');
    file.write_all_at(record.as_bytes(), (seq % 2) * SLOT as u64)
}

/// The slot with the highest sequence among those whose checksum holds.
fn newest(file: &File) -> io::Result<(u64, CursorPosition)> {
    let mut buf = [0u8; 2 * SLOT];
    let n = file.read_at(&mut buf, 0)?;
    buf[n..].fill(0);
    buf.chunks(SLOT)
        .filter_map(parse_slot)
        .max_by_key(|(seq, _)| *seq)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no valid cursor record"))
}

fn parse_slot(slot: &[u8]) -> Option<(u64, CursorPosition)> {
    let text = std::str::from_utf8(slot).ok()?.trim_end();
    let (body, sum) = text.rsplit_once(' ')?;
    if hex(&Sha256::digest(body.as_bytes())).get(..16)? != sum {
        return None;
    }
    let mut parts = body.split(' ');
    let seq = u64::from_str_radix(parts.next()?, 16).ok()?;
    let through = parts.next()?;
    let partial = parts.next().filter(|p| !p.bytes().all(|b| b == b'-'));
    Some((seq, CursorPosition::parse(through, partial)?))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commit(n: u8) -> CommitId {
        CommitId(ObjectId::parse(&format!("{n:02x}").repeat(20)).unwrap())
    }

    #[test]
    fn a_cursor_moves_durably_and_a_torn_slot_falls_back_one_step() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.cursor");
        create(&path, CursorPosition::at(commit(1))).unwrap();
        let mut c = DeliveryCursor::claim(&path).unwrap().unwrap();
        assert!(
            DeliveryCursor::claim(&path).unwrap().is_none(),
            "one holder at a time"
        );
        c.advance(
            CursorPosition {
                through: commit(1),
                partial: Some(commit(2)),
            },
            true,
        )
        .unwrap();
        c.advance(CursorPosition::at(commit(2)), true).unwrap();
        assert_eq!(read(&path).unwrap(), CursorPosition::at(commit(2)));
        drop(c);
        // Creation wrote seq 0 and 1; the moves seq 2 (slot 0) and 3 (slot 1). The newest
        // torn: the one before it (seq 2) is read.
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(&[0u8; 64], SLOT as u64).unwrap();
        assert_eq!(
            read(&path).unwrap(),
            CursorPosition {
                through: commit(1),
                partial: Some(commit(2))
            }
        );
        // Both gone: an error, never a guess.
        f.write_all_at(&[0u8; 2 * SLOT], 0).unwrap();
        assert!(read(&path).is_err());
    }
}
