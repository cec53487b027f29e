//! HAProxy as the router of shards: a map entry switched through its runtime API (`set map`, else `add map`), and the map file rewritten for its restarts.
use std::io::{BufRead, Read, Write};
use std::path::Path;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum HaproxyError {
    #[error("HAProxy runtime API at {addr}: {source}")]
    Connect {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("HAProxy runtime API at {addr} refused `{command}`: {answer}")]
    Refused {
        addr: String,
        command: String,
        answer: String,
    },
    #[error("map file {}: {source}", path.display())]
    MapFile {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// How long one runtime API command may take.
const TIMEOUT: Duration = Duration::from_secs(5);

/// The UNIX socket `addr` names, if it names one: `unix:PATH`, or any path (absolute or
/// relative, such as `target/local-shards/admin.sock`, or `admin.sock`), which a `HOST:PORT`
/// never looks like (no `/`, one `:`).
fn socket_path(addr: &str) -> Option<&str> {
    if let Some(path) = addr.strip_prefix("unix:") {
        return Some(path);
    }
    (addr.contains('/') || !addr.contains(':')).then_some(addr)
}

/// Sends one command to the runtime API at `addr` (a socket path, `unix:PATH` or `HOST:PORT`)
/// and returns its answer.
fn command(addr: &str, command: &str) -> Result<String, HaproxyError> {
    let connect = |source| HaproxyError::Connect {
        addr: addr.to_owned(),
        source,
    };
    let line = format!("{command}\n");
    let mut answer = String::new();
    if let Some(path) = socket_path(addr) {
        let mut s = std::os::unix::net::UnixStream::connect(path).map_err(connect)?;
        s.set_read_timeout(Some(TIMEOUT)).map_err(connect)?;
        s.write_all(line.as_bytes()).map_err(connect)?;
        s.read_to_string(&mut answer).map_err(connect)?;
    } else {
        let mut s = std::net::TcpStream::connect(addr).map_err(connect)?;
        s.set_read_timeout(Some(TIMEOUT)).map_err(connect)?;
        s.write_all(line.as_bytes()).map_err(connect)?;
        s.read_to_string(&mut answer).map_err(connect)?;
    }
    Ok(answer.trim().to_owned())
}

/// The backends of the HAProxy at `addr` (`show backend`).
pub fn backends(addr: &str) -> Result<Vec<String>, HaproxyError> {
    let answer = command(addr, "show backend")?;
    Ok(answer
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.trim().to_owned())
        .collect())
}

/// Checks that the HAProxy at `addr` has loaded the map `map` (`show map`).
pub fn check_map(addr: &str, map: &str) -> Result<(), HaproxyError> {
    let command_line = format!("show map {map}");
    let answer = command(addr, &command_line)?;
    if answer.to_ascii_lowercase().contains("unknown map") {
        return Err(HaproxyError::Refused {
            addr: addr.to_owned(),
            command: command_line,
            answer: format!("{answer} (--map is the map's path as haproxy.cfg names it)"),
        });
    }
    Ok(())
}

/// Checks that the map file can be rewritten: its folder exists, and the file, if there, is
/// a file that can be opened for writing.
pub fn check_map_file(path: &Path) -> Result<(), HaproxyError> {
    let err = |source| HaproxyError::MapFile {
        path: path.to_owned(),
        source,
    };
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !dir.is_dir() {
        return Err(err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "its folder does not exist",
        )));
    }
    if path.exists() {
        std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(err)?;
    }
    Ok(())
}

/// Points `key` at `value` in the map `map` (its name in the HAProxy config, the file's
/// path) of the HAProxy at `addr`: `set map` changes an entry, `add map` makes a missing one.
pub fn set_map(addr: &str, map: &str, key: &str, value: &str) -> Result<(), HaproxyError> {
    let set = format!("set map {map} {key} {value}");
    let answer = command(addr, &set)?;
    if answer.is_empty() {
        return Ok(());
    }
    if !answer.to_ascii_lowercase().contains("not found") {
        return Err(HaproxyError::Refused {
            addr: addr.to_owned(),
            command: set,
            answer,
        });
    }
    let add = format!("add map {map} {key} {value}");
    let answer = command(addr, &add)?;
    if answer.is_empty() {
        Ok(())
    } else {
        Err(HaproxyError::Refused {
            addr: addr.to_owned(),
            command: add,
            answer,
        })
    }
}

/// Rewrites the map file with `key` pointing at `value` (its line replaced, or added), all or
/// nothing: written aside, synced, renamed over the file. Comments and other lines stay.
pub fn write_map_file(path: &Path, key: &str, value: &str) -> Result<(), HaproxyError> {
    let err = |source| HaproxyError::MapFile {
        path: path.to_owned(),
        source,
    };
    let old = match std::fs::File::open(path) {
        Ok(f) => std::io::BufReader::new(f)
            .lines()
            .collect::<Result<Vec<_>, _>>()
            .map_err(err)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(err(e)),
    };
    let mut text = String::new();
    let mut found = false;
    for line in old {
        if line.split_whitespace().next() == Some(key) {
            if !found {
                text.push_str(&format!("{key} {value}\n"));
            }
            found = true;
        } else {
            text.push_str(&line);
            text.push('\n');
        }
    }
    if !found {
        text.push_str(&format!("{key} {value}\n"));
    }
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(".tenants-map-")
        .tempfile_in(dir)
        .map_err(err)?;
    tmp.write_all(text.as_bytes()).map_err(err)?;
    // As readable as a map file is (a temporary file is made 0600).
    std::fs::set_permissions(
        tmp.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .map_err(err)?;
    tmp.as_file().sync_all().map_err(err)?;
    tmp.persist(path).map_err(|e| err(e.error))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_map_file_keeps_other_lines_and_gets_one_entry_per_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tenants.map");
        std::fs::write(&path, "# tenant backend\nacme shard_a\nglobex shard_a\n").unwrap();
        write_map_file(&path, "acme", "shard_b").unwrap();
        write_map_file(&path, "initech", "shard_b").unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "# tenant backend\nacme shard_b\nglobex shard_a\ninitech shard_b\n"
        );
    }

    #[test]
    fn a_runtime_api_address_is_a_socket_path_unless_it_is_host_and_port() {
        for (addr, path) in [
            ("/run/haproxy/admin.sock", Some("/run/haproxy/admin.sock")),
            (
                "target/local-shards/admin.sock",
                Some("target/local-shards/admin.sock"),
            ),
            ("./admin.sock", Some("./admin.sock")),
            ("admin.sock", Some("admin.sock")),
            ("unix:admin.sock", Some("admin.sock")),
            ("127.0.0.1:9999", None),
            ("haproxy.internal:9999", None),
            ("[::1]:9999", None),
        ] {
            assert_eq!(socket_path(addr), path, "{addr}");
        }
    }

    #[test]
    fn a_missing_entry_is_added_through_the_runtime_api() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("admin.sock");
        let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let server = std::thread::spawn(move || {
            let mut seen = Vec::new();
            for answer in ["entry not found.\n", ""] {
                let (mut s, _) = listener.accept().unwrap();
                let mut line = String::new();
                std::io::BufReader::new(&mut s)
                    .read_line(&mut line)
                    .unwrap();
                seen.push(line.trim().to_owned());
                s.write_all(answer.as_bytes()).unwrap();
            }
            seen
        });
        set_map(
            sock.to_str().unwrap(),
            "/etc/haproxy/tenants.map",
            "acme",
            "shard_b",
        )
        .unwrap();
        assert_eq!(
            server.join().unwrap(),
            [
                "set map /etc/haproxy/tenants.map acme shard_b",
                "add map /etc/haproxy/tenants.map acme shard_b"
            ]
        );
    }
}
