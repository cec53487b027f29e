//! The client's files on this machine: a write's input (a path or stdin), the edit buffer kept until a write lands, the three texts of a merge, and the mirror's files replaced atomically (written aside, synced, renamed, folder synced).
use super::ClientError;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

fn io(what: &str, path: &Path, e: std::io::Error) -> ClientError {
    ClientError::Usage(format!("{what} {}: {e}", path.display()))
}

/// The text of `path`, or of stdin for `-`.
pub fn read_input(path: &str) -> Result<String, ClientError> {
    let mut text = String::new();
    if path == "-" {
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| ClientError::Usage(format!("stdin: {e}")))?;
    } else {
        text = std::fs::read_to_string(path).map_err(|e| io("read", Path::new(path), e))?;
    }
    Ok(text)
}

/// The token in `path` (surrounding whitespace dropped).
pub fn read_token(path: &Path) -> Result<String, ClientError> {
    std::fs::read_to_string(path)
        .map(|t| t.trim().to_owned())
        .map_err(|e| io("read the token file", path, e))
}

/// The edit buffer: a file of its own in the temporary folder, kept when the edit does not
/// land (its path is printed), removed when it does.
pub struct Buffer {
    path: PathBuf,
}

impl Buffer {
    pub fn new(name: &str) -> Result<Self, ClientError> {
        let file = tempfile::Builder::new()
            .prefix(&format!("planfiles-edit-{name}-"))
            .suffix(".yaml")
            .tempfile()
            .map_err(|e| io("make the edit buffer in", &std::env::temp_dir(), e))?;
        let (_, path) = file
            .keep()
            .map_err(|e| ClientError::Usage(format!("keep the edit buffer: {e}")))?;
        Ok(Self { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn write(&self, text: &str) -> Result<(), ClientError> {
        std::fs::write(&self.path, text).map_err(|e| io("write", &self.path, e))
    }

    pub fn read(&self) -> Result<String, ClientError> {
        std::fs::read_to_string(&self.path).map_err(|e| io("read", &self.path, e))
    }

    /// The edit landed: the buffer goes.
    pub fn remove(self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// `git merge-file` of `yours` and `theirs` from `base`: the merged text and how many hunks
/// conflict (marked `<<<<<<< yours`, `=======`, `>>>>>>> theirs`).
pub fn merge(yours: &str, base: &str, theirs: &str) -> Result<(String, usize), ClientError> {
    let dir = tempfile::tempdir().map_err(|e| io("make a folder in", &std::env::temp_dir(), e))?;
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).map(|()| path)
    };
    let paths = (|| {
        Ok::<_, std::io::Error>((
            write("yours", yours)?,
            write("base", base)?,
            write("theirs", theirs)?,
        ))
    })()
    .map_err(|e| io("write the merge's texts in", dir.path(), e))?;
    let out = std::process::Command::new("git")
        .args([
            "merge-file",
            "-p",
            "-L",
            "yours",
            "-L",
            "base",
            "-L",
            "theirs",
        ])
        .args([&paths.0, &paths.1, &paths.2])
        .output()
        .map_err(|e| {
            ClientError::Usage(format!(
                "run git merge-file (git is needed for a merge): {e}"
            ))
        })?;
    match out.status.code() {
        Some(n) if (0..128).contains(&n) => Ok((
            String::from_utf8_lossy(&out.stdout).into_owned(),
            n as usize,
        )),
        _ => Err(ClientError::Usage(format!(
            "git merge-file failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))),
    }
}

/// Replaces `dir/name` with `bytes` so that a reader (or a crash) sees the old file or the
/// new one, never a part: written aside, synced, renamed over it, the folder synced.
pub fn replace(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), ClientError> {
    let aside = dir.join(format!(".{name}.planfiles-tmp"));
    let target = dir.join(name);
    (|| {
        let mut f = std::fs::File::create(&aside)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&aside, &target)?;
        std::fs::File::open(dir)?.sync_all()
    })()
    .map_err(|e| io("replace", &target, e))
}

/// The text of `dir/name`, if it is there.
pub fn read_kept(dir: &Path, name: &str) -> Option<String> {
    std::fs::read_to_string(dir.join(name)).ok()
}

/// Makes `dir` if it is missing.
pub fn ensure_dir(dir: &Path) -> Result<(), ClientError> {
    std::fs::create_dir_all(dir).map_err(|e| io("make", dir, e))
}
