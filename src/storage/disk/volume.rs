//! What kind of volume a path is on (`statfs` f_type): its name, whether other hosts share it, whether `syncfs` flushes it, and whether it is ext4 without a journal.
use std::borrow::Cow;
use std::ffi::CString;
use std::io;
use std::mem::MaybeUninit;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Where a data dir lives, as far as inotify is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VolumeKind {
    /// A local filesystem: inotify sees every change, since every writer is on this host.
    Local,
    /// A network, cluster or FUSE filesystem, by name: other hosts (or a FUSE daemon) can
    /// change files without this kernel knowing, so inotify misses those changes.
    Shared(&'static str),
}

/// What planfiles knows of a file system type.
struct Known {
    magic: u32,
    name: &'static str,
    /// Other hosts, or a user-space daemon, can change it behind this kernel's back.
    shared: bool,
    /// `syncfs(2)` writes back every dirty page and inode of the volume and flushes the
    /// device (the file system's own `sync_fs`: a journal commit, a transaction commit or a
    /// checkpoint), and reports writeback errors (Linux 5.8 and later).
    syncfs_flushes: bool,
    /// Group commit on it has been cut at the block level and lost nothing
    /// (`tests/block_crash`): what `durability = "auto"` asks before it picks group commit.
    crash_tested: bool,
}

const fn fs(magic: u32, name: &'static str, shared: bool, syncfs_flushes: bool) -> Known {
    Known {
        magic,
        name,
        shared,
        syncfs_flushes,
        crash_tested: false,
    }
}

/// A file system on which group commit has been crashed at the block level.
const fn crash_tested(known: Known) -> Known {
    Known {
        crash_tested: true,
        ..known
    }
}

/// Filesystem magic numbers (`linux/magic.h` and the filesystems' own headers). Group commit
/// relies on `syncfs` only on the four local block file systems; everything else (FUSE,
/// whose daemon the kernel never passes `syncfs` to; network and cluster file systems;
/// overlay; tmpfs; anything not listed) gets per-file `fsync` under `durability = "auto"`.
const KNOWN: &[Known] = &[
    crash_tested(fs(0x0000_EF53, "ext4", false, true)),
    fs(0x5846_5342, "xfs", false, true),
    fs(0x9123_683E, "btrfs", false, true),
    fs(0xF2F5_2010, "f2fs", false, true),
    fs(0x0102_1994, "tmpfs", false, false),
    fs(0x794C_7630, "overlay", false, false),
    fs(0x2FC1_2FC1, "zfs", false, false),
    fs(0x0000_6969, "nfs", true, false),
    fs(0x0000_517B, "smb", true, false),
    fs(0xFE53_4D42, "smb2", true, false),
    fs(0xFF53_4D42, "cifs", true, false),
    fs(0x00C3_6400, "ceph", true, false),
    fs(0x6573_5546, "fuse", true, false),
    fs(0x0102_1997, "9p", true, false),
    fs(0x5346_414F, "afs", true, false),
    fs(0x6B41_4653, "kafs", true, false),
    fs(0x7375_7245, "coda", true, false),
    fs(0x0000_564C, "ncp", true, false),
    fs(0x7461_636F, "ocfs2", true, false),
    fs(0x0116_1970, "gfs2", true, false),
    fs(0x0BD0_0BD0, "lustre", true, false),
    fs(0x4750_4653, "gpfs", true, false),
    fs(0x2003_0528, "orangefs", true, false),
    fs(0x786F_4256, "vboxsf", true, false),
];

/// The file system a path is on, by its `statfs` magic number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Volume {
    magic: u32,
}

impl Volume {
    /// The volume of a `statfs` f_type. Magic numbers are 32 bits; `f_type` is a signed word
    /// whose width depends on the architecture, so only its low 32 bits count.
    pub fn from_magic(f_type: u32) -> Self {
        Self { magic: f_type }
    }

    fn known(&self) -> Option<&'static Known> {
        KNOWN.iter().find(|k| k.magic == self.magic)
    }

    /// `ext4`, `fuse`, … or `unknown (0x…)`.
    pub fn name(&self) -> Cow<'static, str> {
        match self.known() {
            Some(k) => Cow::Borrowed(k.name),
            None => Cow::Owned(format!("unknown ({:#x})", self.magic)),
        }
    }

    pub fn kind(&self) -> VolumeKind {
        match self.known() {
            Some(k) if k.shared => VolumeKind::Shared(k.name),
            _ => VolumeKind::Local,
        }
    }

    /// True on the local block file systems whose `syncfs` is known to reach the disk.
    pub fn syncfs_flushes(&self) -> bool {
        self.known().is_some_and(|k| k.syncfs_flushes)
    }

    /// True where group commit is also proven by a power cut at the block level (ext4).
    pub fn group_crash_tested(&self) -> bool {
        self.known()
            .is_some_and(|k| k.syncfs_flushes && k.crash_tested)
    }
}

/// The volume `path` is on.
pub fn volume(path: &Path) -> io::Result<Volume> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let mut buf = MaybeUninit::<libc::statfs>::zeroed();
    // SAFETY: `c_path` is a NUL-terminated string and `buf` has room for one `statfs`,
    // which the call fills in when it returns 0.
    let rc = unsafe { libc::statfs(c_path.as_ptr(), buf.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: statfs returned 0, so it wrote the whole struct.
    let stat = unsafe { buf.assume_init() };
    // f_type is a signed word whose width differs between architectures.
    Ok(Volume::from_magic(stat.f_type as u32))
}

/// Whether `path` is on ext4 without a journal, where the inode allocator skips, and looks
/// up, every inode freed in the last minutes: the volume's block device (`/sys/dev/block`)
/// has no journal thread in `/proc/fs/jbd2/`. False when any of that cannot be read.
pub fn ext4_without_journal(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    if volume(path).map(|v| v.name()).ok().as_deref() != Some("ext4") {
        return false;
    }
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    let (major, minor) = (libc::major(meta.dev()), libc::minor(meta.dev()));
    let Ok(uevent) = std::fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/uevent"))
    else {
        return false;
    };
    let Some(device) = uevent.lines().find_map(|l| l.strip_prefix("DEVNAME=")) else {
        return false;
    };
    // A journal's thread is `<device>-<journal inode>`.
    match std::fs::read_dir("/proc/fs/jbd2") {
        Ok(journals) => !journals
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().into_string().ok())
            .any(|name| name.rsplit_once('-').is_some_and(|(d, _)| d == device)),
        // Unknown: as if it had one (recycling is a speed-up, not a promise).
        Err(_) => false,
    }
}

/// The volume `path` is on, or would be on once made: that of its nearest existing folder.
pub fn volume_at_or_above(path: &Path) -> io::Result<Volume> {
    let mut at = path;
    loop {
        match volume(at) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => match at.parent() {
                Some(p) if !p.as_os_str().is_empty() => at = p,
                _ => return volume(Path::new(".")),
            },
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_cluster_and_fuse_magics_are_shared() {
        for (magic, name) in [
            (0x6969, "nfs"),
            (0x517B, "smb"),
            (0xFE53_4D42, "smb2"),
            (0xFF53_4D42, "cifs"),
            (0x00C3_6400, "ceph"),
            (0x6573_5546, "fuse"),
            (0x0102_1997, "9p"),
        ] {
            let volume = Volume::from_magic(magic);
            assert_eq!(volume.kind(), VolumeKind::Shared(name), "{magic:#x}");
            assert!(!volume.syncfs_flushes(), "{name}");
        }
        // CIFS as a sign-extended 32-bit f_type still reads as CIFS.
        assert_eq!(
            Volume::from_magic(0xFF53_4D42_u32 as i32 as i64 as u32).kind(),
            VolumeKind::Shared("cifs")
        );
    }

    #[test]
    fn only_the_local_block_file_systems_trust_syncfs() {
        for (magic, name, flushes) in [
            (0xEF53, "ext4", true),
            (0x5846_5342, "xfs", true),
            (0x9123_683E, "btrfs", true),
            (0xF2F5_2010, "f2fs", true),
            (0x0102_1994, "tmpfs", false),
            (0x794C_7630, "overlay", false),
            (0x2FC1_2FC1, "zfs", false),
        ] {
            let volume = Volume::from_magic(magic);
            assert_eq!(volume.kind(), VolumeKind::Local, "{name}");
            assert_eq!(volume.name(), name);
            assert_eq!(volume.syncfs_flushes(), flushes, "{name}");
        }
        let unknown = Volume::from_magic(0x1234_5678);
        assert_eq!(unknown.name(), "unknown (0x12345678)");
        assert!(!unknown.syncfs_flushes());
    }

    #[test]
    fn the_temp_dir_has_a_known_type() {
        let dir = tempfile::tempdir().unwrap();
        let volume = volume(dir.path()).unwrap();
        assert_eq!(volume.kind(), VolumeKind::Local);
        assert!(!volume.name().starts_with("unknown"), "{}", volume.name());
    }

    #[test]
    fn a_missing_path_is_an_error_unless_its_nearest_folder_is_asked() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope/deeper");
        let err = volume(&missing).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert_eq!(
            volume_at_or_above(&missing).unwrap(),
            volume(dir.path()).unwrap()
        );
    }
}
