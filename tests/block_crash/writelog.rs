//! The write log of QEMU's `blklogwrites` driver (the format of Linux's dm-log-writes): read its entries, find the flushes, and rebuild the disk as a power loss at a flush would leave it.
//!
//! The log is a super block in sector 0, then one entry per guest request: a header sector
//! (`sector`, `nr_sectors`, `flags`, `data_len`, little-endian) followed by the data of a
//! write, rounded up to whole log sectors. A flush is an entry with the flush flag and no
//! data. An entry is written after the request reached the disk file and before the guest is
//! told it completed, so the log's length when a client got its answer is an upper bound of
//! where the flushes that answer waited for end.
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

const MAGIC: u64 = 0x006a_7366_7773_6872;
const FLUSH: u64 = 1;
const FUA: u64 = 2;
const DISCARD: u64 = 4;
const MARK: u64 = 8;
const KNOWN: u64 = FLUSH | FUA | DISCARD | MARK;

/// One request of the guest, as logged.
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    /// Where the entry ends in the log: the log's length once it was logged.
    pub end: u64,
    pub flags: u64,
    /// The first disk byte written, and how many.
    pub disk_offset: u64,
    pub len: u64,
    /// Where the written bytes are in the log.
    pub data_at: u64,
}

impl Entry {
    pub fn is_flush(&self) -> bool {
        self.flags & FLUSH != 0
    }

    fn is_write(&self) -> bool {
        self.flags & (DISCARD | MARK) == 0 && self.len > 0
    }
}

/// A parsed log: every whole entry, in the order the requests completed.
pub struct WriteLog {
    file: File,
    pub entries: Vec<Entry>,
}

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

impl WriteLog {
    /// Reads the log at `path`. Stops at the first entry that is not whole: the guest was
    /// killed while QEMU logged it, so it never completed.
    pub fn read(path: &Path) -> io::Result<Self> {
        let file = File::open(path)?;
        let size = file.metadata()?.len();
        let mut sup = [0u8; 28];
        file.read_exact_at(&mut sup, 0)?;
        if le64(&sup, 0) != MAGIC {
            return Err(io::Error::other("not a blklogwrites log (bad magic)"));
        }
        let sector = u32::from_le_bytes(sup[24..28].try_into().unwrap()) as u64;
        if !sector.is_power_of_two() || sector < 32 {
            return Err(io::Error::other(format!("bad log sector size {sector}")));
        }
        let mut entries = Vec::new();
        let mut at = sector;
        let mut header = [0u8; 32];
        while at + sector <= size {
            file.read_exact_at(&mut header, at)?;
            let (first, count, flags) = (le64(&header, 0), le64(&header, 8), le64(&header, 16));
            if flags & !KNOWN != 0 || (flags == 0 && count == 0) {
                break;
            }
            let data_sectors = if flags & DISCARD != 0 { 0 } else { count };
            let end = at + sector + data_sectors * sector;
            if end > size {
                break;
            }
            entries.push(Entry {
                end,
                flags,
                disk_offset: first * sector,
                len: count * sector,
                data_at: at + sector,
            });
            at = end;
        }
        Ok(Self { file, entries })
    }

    /// The indexes of the flush entries.
    pub fn flushes(&self) -> Vec<usize> {
        (0..self.entries.len())
            .filter(|&i| self.entries[i].is_flush())
            .collect()
    }

    /// Writes entries `from..to` onto `disk`: each write as logged, each discarded range as
    /// zeros (what a disk may read back after a discard).
    pub fn apply(&self, from: usize, to: usize, disk: &File) -> io::Result<()> {
        let mut buf = Vec::new();
        for e in &self.entries[from..to] {
            if e.flags & DISCARD != 0 {
                buf.clear();
                buf.resize(e.len as usize, 0);
            } else if e.is_write() {
                buf.resize(e.len as usize, 0);
                self.file.read_exact_at(&mut buf, e.data_at)?;
            } else {
                continue;
            }
            disk.write_all_at(&buf, e.disk_offset)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A log as QEMU writes it: a write of two sectors, a flush, a write cut short.
    #[test]
    fn a_log_is_read_to_its_last_whole_entry_and_replayed_up_to_a_flush() {
        let s = 512u64;
        let mut log = vec![0u8; s as usize];
        log[0..8].copy_from_slice(&MAGIC.to_le_bytes());
        log[8..16].copy_from_slice(&1u64.to_le_bytes());
        log[24..28].copy_from_slice(&(s as u32).to_le_bytes());
        let entry = |first: u64, count: u64, flags: u64| {
            let mut h = vec![0u8; s as usize];
            h[0..8].copy_from_slice(&first.to_le_bytes());
            h[8..16].copy_from_slice(&count.to_le_bytes());
            h[16..24].copy_from_slice(&flags.to_le_bytes());
            h
        };
        log.extend(entry(3, 2, 0));
        log.extend(vec![7u8; 2 * s as usize]);
        log.extend(entry(0, 0, FLUSH));
        log.extend(entry(0, 4, 0));
        log.extend(vec![9u8; s as usize]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        std::fs::File::create(&path)
            .unwrap()
            .write_all(&log)
            .unwrap();
        let parsed = WriteLog::read(&path).unwrap();
        assert_eq!(parsed.entries.len(), 2, "the cut entry is not read");
        assert_eq!(parsed.flushes(), vec![1]);
        assert_eq!(parsed.entries[1].end, 5 * s);
        let disk = tempfile::tempfile().unwrap();
        disk.set_len(8 * s).unwrap();
        parsed.apply(0, 1, &disk).unwrap();
        let mut back = vec![0u8; 8 * s as usize];
        disk.read_exact_at(&mut back, 0).unwrap();
        assert!(back[..3 * s as usize].iter().all(|&b| b == 0));
        assert!(back[3 * s as usize..5 * s as usize].iter().all(|&b| b == 7));
        assert!(back[5 * s as usize..].iter().all(|&b| b == 0));
    }
}
