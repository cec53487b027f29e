//! A TCP relay in front of a peer that passes requests at once and holds answers back on command: the slow link (between shards, or between the CLI and a shard) that adversarial reviews use to find races.
#![allow(dead_code)]
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// A relay listening on a local port, forwarding to `upstream`.
pub struct Relay {
    pub port: u16,
    hold: Arc<Mutex<Duration>>,
    stop: Arc<AtomicBool>,
    /// The client side of each connection relayed, to cut.
    live: Arc<Mutex<Vec<TcpStream>>>,
}

impl Relay {
    /// Listens on `port` (0: any) and forwards each connection to `upstream` (`host:port`).
    pub fn start(port: u16, upstream: &str) -> Relay {
        let listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let hold = Arc::new(Mutex::new(Duration::ZERO));
        let stop = Arc::new(AtomicBool::new(false));
        let upstream = upstream.to_owned();
        let (h, s) = (hold.clone(), stop.clone());
        let live = Arc::new(Mutex::new(Vec::new()));
        let l = live.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if s.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                if let Ok(c) = client.try_clone() {
                    l.lock().unwrap().push(c);
                }
                pipe(
                    client.try_clone().unwrap(),
                    server.try_clone().unwrap(),
                    None,
                );
                pipe(server, client, Some(h.clone()));
            }
        });
        Relay {
            port,
            hold,
            stop,
            live,
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Cuts every connection relayed so far, wherever its bytes are (a dropped link); the
    /// number cut.
    pub fn cut_all(&self) -> usize {
        let live = std::mem::take(&mut *self.live.lock().unwrap());
        for c in &live {
            let _ = c.shutdown(Shutdown::Both);
        }
        live.len()
    }

    /// From now on, every byte of an answer reaches the client `delay` after the peer sent
    /// it (order kept); requests still pass at once.
    pub fn hold_answers(&self, delay: Duration) {
        *self.hold.lock().unwrap() = delay;
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the accept loop so that it sees the stop.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Copies `from` to `to` until either closes; with `hold`, each chunk is written once the
/// delay set when it arrived has passed.
fn pipe(mut from: TcpStream, to: TcpStream, hold: Option<Arc<Mutex<Duration>>>) {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let due = Instant::now()
                        + hold.as_ref().map_or(Duration::ZERO, |h| *h.lock().unwrap());
                    if tx.send((due, buf[..n].to_vec())).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = from.shutdown(Shutdown::Read);
    });
    std::thread::spawn(move || {
        let mut to = to;
        for (due, chunk) in rx {
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            if to.write_all(&chunk).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}
