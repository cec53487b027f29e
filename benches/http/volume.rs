//! The volume the benchmark writes to: its filesystem, and for ext4 whether it has a journal,
//! which decides how much recent deletions slow down new files (docs/PERFORMANCE.md).
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// One line for the report, e.g. "ext4 on /dev/vda, no journal: ...".
pub fn describe(dir: &Path) -> String {
    let Ok(meta) = std::fs::metadata(dir) else {
        return "unknown (cannot stat the data dir)".into();
    };
    let (major, minor) = (libc::major(meta.dev()), libc::minor(meta.dev()));
    let Ok(mountinfo) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return "unknown (no /proc/self/mountinfo)".into();
    };
    // Fields: id parent major:minor root mount-point options... - fstype source super-options
    let wanted = format!("{major}:{minor}");
    let Some((fstype, source)) = mountinfo.lines().find_map(|line| {
        let mut fields = line.split(' ');
        if fields.nth(2) != Some(wanted.as_str()) {
            return None;
        }
        let mut after = line.split(" - ").nth(1)?.split(' ');
        Some((after.next()?.to_owned(), after.next()?.to_owned()))
    }) else {
        return format!("unknown (device {wanted} not in mountinfo)");
    };
    if fstype != "ext4" {
        return format!("{fstype} on {source}");
    }
    // jbd2 names each journal `<device>-<inode>`, e.g. `vda-8`.
    let prefix = format!("{}-", source.rsplit('/').next().unwrap_or(&source));
    let journaled = std::fs::read_dir("/proc/fs/jbd2")
        .map(|entries| {
            entries.flatten().any(|e| {
                e.file_name()
                    .to_str()
                    .is_some_and(|n| n.starts_with(&prefix))
            })
        })
        .unwrap_or(false);
    if journaled {
        format!("ext4 on {source}, with a journal")
    } else {
        format!(
            "ext4 on {source}, NO journal: new files get slower for minutes after files are \
             deleted on this volume (a build, rm -rf, an earlier run's clean-up); wait ~6 minutes \
             after those before comparing write figures across runs"
        )
    }
}
