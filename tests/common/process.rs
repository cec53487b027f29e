//! The real binary as a child process: `planfiles serve` on a random port, killed on drop.
use serde_json::Value;
use std::io::{BufRead, BufReader};

use std::path::Path;
use std::process::{Child, Command, Stdio};

/// A `planfiles` command with the test secret and `<dir>/data` as its data dir.
pub fn planfiles(dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_planfiles"));
    cmd.current_dir(dir)
        .env_remove("PLANFILES_CONFIG")
        .env("PLANFILES_DATA_DIR", dir.join("data"))
        .env("PLANFILES_JWT_SECRET", super::SECRET);
    cmd
}

/// A temporary directory whose `data/` holds a copy of the demo tenants, as [`planfiles`]
/// and [`serve`] expect.
pub fn data_dir_with_fixture() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    super::copy_tree(
        &super::fixture_dir().join("tenants"),
        &dir.path().join("data/tenants"),
    );
    dir
}

/// A running `planfiles serve`, killed on drop.
pub struct Server {
    child: Child,
    pub addr: String,
    pub log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    /// Copies stderr into `log`; ends when the process closes stderr.
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// SIGKILL, as a crash or the OOM killer would.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn wait(&mut self) -> std::process::ExitStatus {
        self.child.wait().unwrap()
    }

    /// Sends `signal` (`TERM`, `INT`), waits for the process to exit and for `log` to hold
    /// every line it wrote.
    pub fn stop(&mut self, signal: &str) -> std::process::ExitStatus {
        self.signal(signal);
        let status = self.wait();
        if let Some(reader) = self.reader.take() {
            reader.join().unwrap();
        }
        status
    }

    /// Sends `signal` (`TERM`, `INT`) to the process.
    pub fn signal(&self, signal: &str) {
        let sent = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .unwrap();
        assert!(sent.success(), "kill -{signal}");
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.addr, path)
    }

    /// A forced write of the integration file with a token for `tenant`.
    pub async fn put_integration(&self, tenant: &str, content: Value) -> reqwest::Response {
        reqwest::Client::new()
            .put(self.url("/plans/integration-file"))
            .bearer_auth(super::token(tenant, super::ALL))
            .json(&serde_json::json!({ "content": content }))
            .send()
            .await
            .unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// The address in the "planfiles listening" line, in either log format.
fn listening_addr(line: &str) -> Option<String> {
    if let Ok(v) = serde_json::from_str::<Value>(line) {
        return (v["message"] == "planfiles listening")
            .then(|| v["addr"].as_str().unwrap().to_owned());
    }
    let rest = line.split_once("planfiles listening addr=")?.1;
    Some(rest.split_whitespace().next()?.to_owned())
}

/// Starts the binary on a random port and waits for its "listening" line.
pub fn serve(dir: &Path, extra_env: &[(&str, &str)]) -> Server {
    let mut cmd = planfiles(dir);
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    serve_command(cmd)
}

/// [`serve`] with a command made by [`planfiles`] and changed by the caller (limits, say);
/// a random port and JSON logs unless the caller set `PLANFILES_BIND` or
/// `PLANFILES_LOG_FORMAT`.
pub fn serve_command(mut cmd: Command) -> Server {
    for (name, value) in [
        ("PLANFILES_BIND", "127.0.0.1:0"),
        ("PLANFILES_LOG_FORMAT", "json"),
    ] {
        if !cmd.get_envs().any(|(k, _)| k == name) {
            cmd.env(name, value);
        }
    }
    cmd.stderr(Stdio::piped()).stdout(Stdio::null());
    let mut child = cmd.arg("serve").spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    // Raw lines, decoded lossily: a reader that stopped at the first non-UTF-8 line would let
    // the pipe fill up and block the server.
    let mut lines = BufReader::new(stderr)
        .split(b'\n')
        .map(|l| l.map(|bytes| String::from_utf8_lossy(&bytes).into_owned()));
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let addr = loop {
        let line = lines
            .next()
            .expect("server exited before listening")
            .unwrap();
        log.lock().unwrap().push(line.clone());
        if let Some(addr) = listening_addr(&line) {
            break addr;
        }
    };
    let sink = log.clone();
    let reader = std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            sink.lock().unwrap().push(line);
        }
    });
    Server {
        child,
        addr: format!("http://{addr}"),
        log,
        reader: Some(reader),
    }
}
