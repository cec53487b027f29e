//! What kind of volume a path is on (`statfs` f_type): local, or shared with other hosts.
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

/// Filesystem magic numbers (`linux/magic.h` and the filesystems' own headers) of volumes
/// that other hosts, or a user-space daemon, can change behind this kernel's back.
const SHARED: &[(u32, &str)] = &[
    (0x0000_6969, "nfs"),
    (0x0000_517B, "smb"),
    (0xFE53_4D42, "smb2"),
    (0xFF53_4D42, "cifs"),
    (0x00C3_6400, "ceph"),
    (0x6573_5546, "fuse"),
    (0x0102_1997, "9p"),
    (0x5346_414F, "afs"),
    (0x6B41_4653, "kafs"),
    (0x7375_7245, "coda"),
    (0x0000_564C, "ncp"),
    (0x7461_636F, "ocfs2"),
    (0x0116_1970, "gfs2"),
    (0x0BD0_0BD0, "lustre"),
    (0x4750_4653, "gpfs"),
    (0x2003_0528, "orangefs"),
    (0x786F_4256, "vboxsf"),
];

/// Classifies a `statfs` f_type. Magic numbers are 32 bits; `f_type` is a signed word whose
/// width depends on the architecture, so only its low 32 bits count.
pub fn classify_magic(f_type: u32) -> VolumeKind {
    SHARED
        .iter()
        .find(|(magic, _)| *magic == f_type)
        .map_or(VolumeKind::Local, |(_, name)| VolumeKind::Shared(name))
}

/// The kind of volume `path` is on.
pub fn volume_kind(path: &Path) -> io::Result<VolumeKind> {
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
    Ok(classify_magic(stat.f_type as u32))
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
            assert_eq!(
                classify_magic(magic),
                VolumeKind::Shared(name),
                "{magic:#x}"
            );
        }
        // CIFS as a sign-extended 32-bit f_type still reads as CIFS.
        assert_eq!(
            classify_magic(0xFF53_4D42_u32 as i32 as i64 as u32),
            VolumeKind::Shared("cifs")
        );
    }

    #[test]
    fn local_magics_are_local() {
        for magic in [
            0xEF53,      // ext2/3/4
            0x5846_5342, // xfs
            0x9123_683E, // btrfs
            0x0102_1994, // tmpfs
            0x794C_7630, // overlayfs
            0x2FC1_2FC1, // zfs
        ] {
            assert_eq!(classify_magic(magic), VolumeKind::Local, "{magic:#x}");
        }
    }

    #[test]
    fn the_temp_dir_is_local() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(volume_kind(dir.path()).unwrap(), VolumeKind::Local);
    }

    #[test]
    fn a_missing_path_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = volume_kind(&dir.path().join("nope")).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }
}
