//! The guest of the block-level tests: a Debian cloud kernel, a busybox initramfs with the planfiles binary, an ext4 disk image, and QEMU with the disk behind its `blklogwrites` driver.
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Size of the data disk. Small, so that copies for each flush point are cheap.
const DISK_MIB: u64 = 128;
/// The guest's loader and the modules it needs, in load order (the cloud kernel has ext4
/// built in, and virtio as modules).
const MODULES: [&str; 9] = [
    "drivers/virtio/virtio.ko",
    "drivers/virtio/virtio_ring.ko",
    "drivers/virtio/virtio_pci_modern_dev.ko",
    "drivers/virtio/virtio_pci_legacy_dev.ko",
    "drivers/virtio/virtio_pci.ko",
    "drivers/block/virtio_blk.ko",
    "net/core/failover.ko",
    "drivers/net/net_failover.ko",
    "drivers/net/virtio_net.ko",
];

/// [`MODULES`] with their bytes, each after the modules its `depends=` names: the order
/// changes between kernel releases (6.1.192 made `virtio` depend on `virtio_ring`).
fn load_order(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut left: Vec<(String, Vec<u8>, Vec<String>)> = MODULES
        .iter()
        .map(|module| {
            let name = Path::new(module).file_name().unwrap().to_str().unwrap();
            let bytes = std::fs::read(dir.join(module)).unwrap();
            let depends = bytes
                .windows(8)
                .position(|w| w == b"depends=")
                .map(|at| {
                    let rest = &bytes[at + 8..];
                    let end = rest.iter().position(|&b| b == 0).unwrap_or(0);
                    String::from_utf8_lossy(&rest[..end])
                        .split(',')
                        .filter(|d| !d.is_empty())
                        .map(|d| format!("{d}.ko"))
                        .collect()
                })
                .unwrap_or_default();
            (name.to_owned(), bytes, depends)
        })
        .collect();
    let mut done: Vec<(String, Vec<u8>)> = Vec::new();
    while !left.is_empty() {
        let ready = left
            .iter()
            .position(|(_, _, deps)| deps.iter().all(|d| done.iter().any(|(n, _)| n == d)))
            .unwrap_or_else(|| panic!("the modules' dependencies cannot be met in order"));
        let (name, bytes, _) = left.remove(ready);
        done.push((name, bytes));
    }
    done
}

/// What the guest runs on its data disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `planfiles serve` with the default configuration but for the bind address, the secret
    /// and `storage.durability` (`auto` is the default).
    Serve { durability: &'static str },
    /// The negative control: a shell loop that writes a file and acknowledges it without any
    /// sync, as a careless service would.
    Control,
}

/// The host's tools and the guest's parts, ready to boot guests.
pub struct Host {
    kernel: PathBuf,
    modules: PathBuf,
    busybox: PathBuf,
    binary: PathBuf,
    /// The host's `git`: the service runs it for pushes (`index-pack`, `rev-list`) and
    /// clones (`upload-pack`), all built into the one binary.
    git: PathBuf,
    work: tempfile::TempDir,
}

/// Why the block-level tests cannot run here, if they cannot.
fn missing_tool() -> Option<String> {
    for tool in [
        "qemu-system-x86_64",
        "mkfs.ext4",
        "e2fsck",
        "debugfs",
        "strip",
        "git",
    ] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            return Some(format!("{tool} is not installed"));
        }
    }
    None
}

impl Host {
    /// The host, or `None` (with the reason printed) when a tool is missing and the tests
    /// are not required (`PLANFILES_BLOCK_TESTS=require` makes that a failure).
    pub fn prepare(test: &str) -> Option<Host> {
        let required = std::env::var("PLANFILES_BLOCK_TESTS").as_deref() == Ok("require");
        let ready = missing_tool().map_or_else(Self::build, Err);
        match ready {
            Ok(host) => Some(host),
            Err(why) if required => panic!("{test} is required here but cannot run: {why}"),
            Err(why) => {
                eprintln!("SKIPPED {test}: {why} (PLANFILES_BLOCK_TESTS=require makes this fail)");
                None
            }
        }
    }

    fn build() -> Result<Host, String> {
        let busybox = find_static_busybox()?;
        let (kernel, modules) = guest_kernel()?;
        let work = tempfile::tempdir().map_err(|e| e.to_string())?;
        // The test profile's binary carries its debug information (about 200 MB); the guest
        // gets a stripped copy. PLANFILES_GUEST_BINARY picks another (a release build writes
        // faster, so more flushes fall inside a group commit).
        let source = std::env::var("PLANFILES_GUEST_BINARY")
            .unwrap_or_else(|_| env!("CARGO_BIN_EXE_planfiles").to_owned());
        let binary = work.path().join("planfiles");
        run(Command::new("strip").arg("-o").arg(&binary).arg(source))?;
        let git = std::env::var_os("PATH")
            .iter()
            .flat_map(std::env::split_paths)
            .map(|dir| dir.join("git"))
            .find(|p| p.is_file())
            .ok_or("git is not on PATH")?;
        Ok(Host {
            kernel,
            modules,
            busybox,
            binary,
            git,
            work,
        })
    }

    /// A new ext4 image (default `mkfs` options but for eager inode-table and journal
    /// initialisation, so the log holds only what the guest's programs cause) holding a
    /// copy of `tenants`.
    pub fn fresh_disk(&self, tenants: &Path, name: &str) -> PathBuf {
        self.disk(name, |seed| {
            super::common::copy_tree(tenants, &seed.join("tenants"))
        })
    }

    /// An empty ext4 image for the negative control.
    pub fn empty_disk(&self, name: &str) -> PathBuf {
        self.disk(name, |seed| {
            std::fs::create_dir_all(seed.join("control")).unwrap()
        })
    }

    /// An ext4 image of [`DISK_MIB`] made from a folder that `fill` fills.
    fn disk(&self, name: &str, fill: impl FnOnce(&Path)) -> PathBuf {
        let seed = self.work.path().join(format!("{name}-seed"));
        std::fs::create_dir_all(&seed).unwrap();
        fill(&seed);
        let image = self.work.path().join(format!("{name}.img"));
        std::fs::File::create(&image)
            .unwrap()
            .set_len(DISK_MIB << 20)
            .unwrap();
        run(Command::new("mkfs.ext4")
            .args([
                "-q",
                "-F",
                "-E",
                "lazy_itable_init=0,lazy_journal_init=0",
                "-d",
            ])
            .arg(&seed)
            .arg(&image))
        .unwrap();
        image
    }

    /// Boots a guest on a copy of `base` (which stays as it was: every replay starts from
    /// it), logging every write and flush to a new log.
    pub fn boot(&self, base: &Path, mode: Mode, name: &str) -> Vm {
        let dir = self.work.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let disk = dir.join("disk.img");
        std::fs::copy(base, &disk).unwrap();
        let log = dir.join("writes.log");
        std::fs::File::create(&log).unwrap();
        let initrd = dir.join("initrd.cpio");
        self.initramfs(mode, &initrd);
        let port = free_port();
        let accel = std::env::var("PLANFILES_GUEST_ACCEL").unwrap_or_else(|_| "tcg".into());
        let accel = if accel == "tcg" {
            "tcg,thread=multi".to_owned()
        } else {
            accel
        };
        let mode_arg = match mode {
            Mode::Serve { .. } => "serve",
            Mode::Control => "control",
        };
        let mut child = Command::new("qemu-system-x86_64")
            .args(["-accel", &accel, "-cpu", "max", "-m", "1024", "-smp", "2"])
            .args([
                "-nodefaults",
                "-display",
                "none",
                "-serial",
                "stdio",
                "-no-reboot",
            ])
            .arg("-kernel")
            .arg(&self.kernel)
            .arg("-initrd")
            .arg(&initrd)
            .args([
                "-append",
                &format!("console=ttyS0 panic=-1 quiet planfiles.mode={mode_arg}"),
            ])
            // The host never needs these files durable: flushes only go to the log.
            .arg("-blockdev")
            .arg(format!(
                "driver=file,node-name=disk0,filename={},cache.no-flush=on",
                disk.display()
            ))
            .arg("-blockdev")
            .arg(format!(
                "driver=file,node-name=log0,filename={},cache.no-flush=on",
                log.display()
            ))
            .args([
                "-blockdev",
                "driver=blklogwrites,node-name=logged,file=disk0,log=log0,log-sector-size=4096",
                // No discards or write-zeroes: every write is logged with its bytes.
                "-device",
                "virtio-blk-pci,drive=logged,discard=off,write-zeroes=off",
                "-netdev",
                &format!("user,id=n0,hostfwd=tcp:127.0.0.1:{port}-:8080"),
                "-device",
                "virtio-net-pci,netdev=n0",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start qemu-system-x86_64");
        let console = Arc::new(Mutex::new(Vec::new()));
        let acks = Arc::new(Mutex::new(Vec::new()));
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let (sink, ack_sink, log_path) = (console.clone(), acks.clone(), log.clone());
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).split(b'\n').map_while(Result::ok) {
                let line = String::from_utf8_lossy(&line).trim_end().to_owned();
                if let Some(n) = line.strip_prefix("ACK ").and_then(|n| n.parse().ok()) {
                    let at = std::fs::metadata(&log_path).map_or(0, |m| m.len());
                    ack_sink.lock().unwrap().push((n, at));
                } else {
                    sink.lock().unwrap().push(line);
                }
            }
        });
        let err_sink = console.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                err_sink.lock().unwrap().push(format!("qemu: {line}"));
            }
        });
        Vm {
            child,
            port,
            log,
            console,
            acks,
            reader: Some(reader),
        }
    }

    /// The initramfs: busybox, the binary with its libraries, the modules, the config and
    /// an `/init` that mounts the disk on `/data` and runs what `mode` says.
    fn initramfs(&self, mode: Mode, out: &Path) {
        let mut cpio = Cpio::default();
        for dir in [
            "bin", "dev", "proc", "sys", "data", "tmp", "etc", "mods", "lib", "lib64",
        ] {
            cpio.dir(dir);
        }
        cpio.file("bin/busybox", &std::fs::read(&self.busybox).unwrap(), 0o755);
        for applet in [
            "sh", "mount", "insmod", "ip", "cat", "echo", "sleep", "mkdir", "poweroff",
        ] {
            cpio.symlink(&format!("bin/{applet}"), "busybox");
        }
        cpio.file(
            "bin/planfiles",
            &std::fs::read(&self.binary).unwrap(),
            0o755,
        );
        cpio.file("bin/git", &std::fs::read(&self.git).unwrap(), 0o755);
        let mut libs = shared_libraries(&self.binary);
        libs.extend(shared_libraries(&self.git));
        libs.sort();
        libs.dedup();
        for lib in libs {
            let inside = lib.strip_prefix("/").unwrap().to_str().unwrap().to_owned();
            let mut parent = PathBuf::new();
            for part in Path::new(&inside).parent().unwrap().components() {
                parent.push(part);
                cpio.dir(parent.to_str().unwrap());
            }
            cpio.file(&inside, &std::fs::read(&lib).unwrap(), 0o755);
        }
        let mut order = String::new();
        for (name, bytes) in load_order(&self.modules) {
            cpio.file(&format!("mods/{name}"), &bytes, 0o644);
            order.push_str(&name);
            order.push('\n');
        }
        cpio.file("mods/order", order.as_bytes(), 0o644);
        let durability = match mode {
            Mode::Serve { durability } => durability,
            Mode::Control => "auto",
        };
        let config = format!(
            "[server]\nbind = \"0.0.0.0:8080\"\n[storage]\ndata_dir = \"/data\"\nseed_from = \"\"\n\
             durability = \"{durability}\"\n[auth]\nsecret = \"{}\"\n[log]\nformat = \"json\"\n",
            super::SECRET
        );
        cpio.file("etc/planfiles.toml", config.as_bytes(), 0o644);
        cpio.file("init", INIT.as_bytes(), 0o755);
        std::fs::write(out, cpio.finish()).unwrap();
    }
}

/// The guest's `/init`: modules, the network QEMU's user mode expects, the data disk, then
/// the service or the control loop. Power goes off when either ends.
const INIT: &str = r#"#!/bin/sh
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $(cat /mods/order); do insmod /mods/$m || echo "GUEST: insmod $m failed"; done
ip link set lo up
ip link set eth0 up
ip addr add 10.0.2.15/24 dev eth0
ip route add default via 10.0.2.2
mount -t ext4 /dev/vda /data || { echo "GUEST: the data disk does not mount"; poweroff -f; }
case "$(cat /proc/cmdline)" in
*planfiles.mode=control*)
  mkdir -p /data/control
  i=0
  while [ $i -lt 1000000 ]; do
    i=$((i+1))
    echo "value $i" > /data/control/f$i
    echo "ACK $i"
    sleep 0.01
  done
  ;;
*)
  cd /data && /bin/planfiles --config /etc/planfiles.toml serve
  echo "GUEST: planfiles exited with $?"
  ;;
esac
poweroff -f
"#;

/// A running guest.
pub struct Vm {
    child: Child,
    pub port: u16,
    /// The write log.
    pub log: PathBuf,
    /// What the guest printed on its console, but for `ACK` lines.
    pub console: Arc<Mutex<Vec<String>>>,
    /// The control's acknowledgements: the number, and the log's length when it was read.
    pub acks: Arc<Mutex<Vec<(u64, u64)>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Vm {
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Waits until the service answers `/healthz` (a guest under TCG boots in seconds).
    pub fn wait_ready(&mut self) {
        let started = Instant::now();
        let http = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        while started.elapsed() < Duration::from_secs(120) {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("the guest stopped ({status}):\n{}", self.console_text());
            }
            if http
                .get(self.url("/healthz"))
                .send()
                .is_ok_and(|r| r.status() == 200)
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!(
            "the guest's service did not answer in 120 s:\n{}",
            self.console_text()
        );
    }

    pub fn console_text(&self) -> String {
        self.console.lock().unwrap().join("\n")
    }

    /// SIGKILL to QEMU: the guest's disk keeps what reached it, and its log says what
    /// was flushed.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        self.kill();
    }
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// A busybox that needs no libraries (Debian's `busybox-static`).
fn find_static_busybox() -> Result<PathBuf, String> {
    let candidates = std::env::var("PLANFILES_GUEST_BUSYBOX")
        .map(|p| vec![PathBuf::from(p)])
        .unwrap_or_else(|_| vec!["/bin/busybox".into(), "/usr/bin/busybox".into()]);
    for path in candidates {
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        // A dynamic executable names its loader.
        if !bytes.windows(15).any(|w| w == b"/lib64/ld-linux") {
            return Ok(path);
        }
    }
    Err("no static busybox (install Debian's busybox-static)".into())
}

/// The shared libraries `binary` loads, and its loader, as `ldd` lists them.
fn shared_libraries(binary: &Path) -> Vec<PathBuf> {
    let out = Command::new("ldd").arg(binary).output().expect("ldd");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let path = match l.split_once("=>") {
                Some((_, rest)) => rest.split_whitespace().next()?,
                None => l.split_whitespace().next()?,
            };
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

/// The guest kernel and its modules folder: `PLANFILES_GUEST_KERNEL_DIR` (a Debian
/// `linux-image-*-cloud-amd64` package unpacked), else Debian's current cloud kernel,
/// fetched once with `apt-get download` into the target folder.
fn guest_kernel() -> Result<(PathBuf, PathBuf), String> {
    // The tests of this binary run at once: one fetches, the others wait for it (two
    // `apt-get download`s into one folder trip over each other).
    static FETCH: Mutex<()> = Mutex::new(());
    let _one_at_a_time = FETCH.lock().unwrap_or_else(|e| e.into_inner());
    let root = match std::env::var("PLANFILES_GUEST_KERNEL_DIR") {
        Ok(dir) => PathBuf::from(dir),
        Err(_) => {
            let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("guest-kernel");
            if !root.join("boot").is_dir() {
                fetch_kernel(&root)?;
            }
            root
        }
    };
    let find = |dir: &Path, prefix: &str| -> Result<PathBuf, String> {
        std::fs::read_dir(dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(prefix))
            })
            .ok_or_else(|| format!("no {prefix}* in {}", dir.display()))
    };
    let kernel = find(&root.join("boot"), "vmlinuz-")?;
    let modules = find(&root.join("lib/modules"), "")?.join("kernel");
    Ok((kernel, modules))
}

fn fetch_kernel(root: &Path) -> Result<(), String> {
    let debs = root.with_extension("debs");
    std::fs::create_dir_all(&debs).map_err(|e| e.to_string())?;
    run(Command::new("apt-get")
        .args(["download", "-q", "linux-image-cloud-amd64"])
        .current_dir(&debs))?;
    let meta = find_deb(&debs, "linux-image-cloud-amd64")?;
    let depends = Command::new("dpkg-deb")
        .args(["-f"])
        .arg(&meta)
        .arg("Depends")
        .output()
        .map_err(|e| e.to_string())?;
    let package = String::from_utf8_lossy(&depends.stdout)
        .split(',')
        .map(|d| d.split_whitespace().next().unwrap_or("").to_owned())
        .find(|d| d.starts_with("linux-image-"))
        .ok_or("the meta package names no kernel")?;
    run(Command::new("apt-get")
        .args(["download", "-q", &package])
        .current_dir(&debs))?;
    let deb = find_deb(&debs, &package)?;
    let unpacking = root.with_extension("partial");
    let _ = std::fs::remove_dir_all(&unpacking);
    run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&unpacking))?;
    std::fs::rename(&unpacking, root).map_err(|e| e.to_string())
}

fn find_deb(dir: &Path, package: &str) -> Result<PathBuf, String> {
    std::fs::read_dir(dir)
        .map_err(|e| e.to_string())?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("{package}_")))
        })
        .ok_or_else(|| format!("apt-get download left no {package}_*.deb"))
}

/// A port that was free a moment ago, for QEMU's forward.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// An initramfs in the kernel's `newc` cpio format.
#[derive(Default)]
struct Cpio {
    bytes: Vec<u8>,
    inode: u32,
    dirs: std::collections::BTreeSet<String>,
}

impl Cpio {
    fn entry(&mut self, name: &str, mode: u32, data: &[u8]) {
        self.inode += 1;
        let header = format!(
            "070701{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}",
            self.inode,
            mode,
            0,
            0,
            1,
            0,
            data.len(),
            0,
            0,
            0,
            0,
            name.len() + 1,
            0
        );
        self.bytes.extend_from_slice(header.as_bytes());
        self.bytes.extend_from_slice(name.as_bytes());
        self.bytes.push(0);
        self.pad();
        self.bytes.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.bytes.len().is_multiple_of(4) {
            self.bytes.push(0);
        }
    }

    fn dir(&mut self, name: &str) {
        if self.dirs.insert(name.to_owned()) {
            self.entry(name, 0o040755, &[]);
        }
    }

    fn file(&mut self, name: &str, data: &[u8], perm: u32) {
        self.entry(name, 0o100000 | perm, data);
    }

    fn symlink(&mut self, name: &str, target: &str) {
        self.entry(name, 0o120777, target.as_bytes());
    }

    fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, &[]);
        self.bytes
    }
}
