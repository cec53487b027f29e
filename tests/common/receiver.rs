//! A webhook receiver for the tests: an actix server on a random port that verifies each delivery's Standard Webhooks signature (its own HMAC code, not the service's), records every request, and answers as each path is told (200, a status, a hang, a redirect).
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How a path answers.
#[derive(Debug, Clone, PartialEq)]
pub enum Mode {
    Ok,
    Status(u16),
    /// Holds the request for a minute without answering.
    Hang,
    /// 302 to another path of this receiver.
    Redirect,
    /// 200 after this long.
    Slow(Duration),
}

/// One request received.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub path: String,
    pub id: String,
    pub timestamp: u64,
    pub body: Value,
    /// The signature checked out against the path's secret, and the timestamp is recent.
    pub verified: bool,
    pub at: Instant,
    pub answered: u16,
}

impl Delivery {
    pub fn kind(&self) -> &str {
        self.body["type"].as_str().unwrap_or_default()
    }

    pub fn commit(&self) -> &str {
        self.body["data"]["commit_sha"].as_str().unwrap_or_default()
    }
}

#[derive(Default)]
struct State {
    secrets: Mutex<HashMap<String, String>>,
    modes: Mutex<HashMap<String, Mode>>,
    got: Mutex<Vec<Delivery>>,
}

pub struct Receiver {
    pub base: String,
    state: Arc<State>,
    handle: actix_web::dev::ServerHandle,
}

impl Receiver {
    pub fn start() -> Self {
        let state = Arc::new(State::default());
        let (tx, rx) = std::sync::mpsc::channel();
        let shared = state.clone();
        std::thread::spawn(move || {
            actix_web::rt::System::new().block_on(async move {
                let data = web::Data::from(shared);
                let server = HttpServer::new(move || {
                    App::new()
                        .app_data(data.clone())
                        .app_data(web::PayloadConfig::new(1 << 20))
                        .default_service(web::to(receive))
                })
                .workers(1)
                .bind("127.0.0.1:0")
                .unwrap();
                let addr = server.addrs()[0];
                let server = server.run();
                tx.send((addr, server.handle())).unwrap();
                let _ = server.await;
            })
        });
        let (addr, handle) = rx.recv().unwrap();
        Self {
            base: format!("http://{addr}"),
            state,
            handle,
        }
    }

    /// The URL of `path` (`/hook/a`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn set_secret(&self, path: &str, secret: &str) {
        self.state
            .secrets
            .lock()
            .unwrap()
            .insert(path.to_owned(), secret.to_owned());
    }

    pub fn set_mode(&self, path: &str, mode: Mode) {
        self.state
            .modes
            .lock()
            .unwrap()
            .insert(path.to_owned(), mode);
    }

    /// What `path` received, in order.
    pub fn deliveries(&self, path: &str) -> Vec<Delivery> {
        self.state
            .got
            .lock()
            .unwrap()
            .iter()
            .filter(|d| d.path == path)
            .cloned()
            .collect()
    }

    /// Waits until `path` has answered 2xx to `n` requests; all it received then.
    pub async fn wait_for(&self, path: &str, n: usize, within: Duration) -> Vec<Delivery> {
        let started = Instant::now();
        loop {
            let got = self.deliveries(path);
            if got.iter().filter(|d| d.answered < 300).count() >= n {
                return got;
            }
            assert!(
                started.elapsed() < within,
                "{path}: {} of {n} deliveries after {within:?}: {:?}",
                got.len(),
                got.iter()
                    .map(|d| (d.kind().to_owned(), d.answered))
                    .collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn stop(self) {
        self.handle.stop(false).await;
    }
}

async fn receive(req: HttpRequest, body: web::Bytes, state: web::Data<State>) -> HttpResponse {
    let path = req.path().to_owned();
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let id = header("webhook-id");
    let timestamp: u64 = header("webhook-timestamp").parse().unwrap_or(0);
    let secret = state.secrets.lock().unwrap().get(&path).cloned();
    let verified = secret
        .is_some_and(|s| verify(&s, &id, timestamp, &body, &header("webhook-signature")))
        && header("content-type") == "application/json";
    let mode = state
        .modes
        .lock()
        .unwrap()
        .get(&path)
        .cloned()
        .unwrap_or(Mode::Ok);
    let answered = match mode {
        Mode::Ok => 200,
        Mode::Status(s) => s,
        Mode::Hang => 0,
        Mode::Redirect => 302,
        Mode::Slow(_) => 200,
    };
    state.got.lock().unwrap().push(Delivery {
        path,
        id,
        timestamp,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        verified,
        at: Instant::now(),
        answered,
    });
    match mode {
        Mode::Ok => HttpResponse::Ok().body("thanks"),
        Mode::Status(s) => HttpResponse::build(actix_web::http::StatusCode::from_u16(s).unwrap())
            .body(format!("receiver says {s}")),
        Mode::Hang => {
            tokio::time::sleep(Duration::from_secs(60)).await;
            HttpResponse::Ok().finish()
        }
        Mode::Slow(pause) => {
            tokio::time::sleep(pause).await;
            HttpResponse::Ok().body("thanks, slowly")
        }
        Mode::Redirect => HttpResponse::Found()
            .insert_header(("Location", "/redirected"))
            .finish(),
    }
}

/// The Standard Webhooks check: `v1,<base64 HMAC-SHA256(key, id.timestamp.body)>` among the
/// space-separated signatures, the key being the base64 after `whsec_`, and a timestamp
/// within five minutes.
fn verify(secret: &str, id: &str, timestamp: u64, body: &[u8], signatures: &str) -> bool {
    let Some(key) = secret
        .strip_prefix("whsec_")
        .and_then(|k| STANDARD.decode(k).ok())
    else {
        return false;
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    if now.abs_diff(timestamp) > 300 || id.is_empty() {
        return false;
    }
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body);
    let expected = STANDARD.encode(mac.finalize().into_bytes());
    signatures
        .split(' ')
        .filter_map(|s| s.strip_prefix("v1,"))
        .any(|s| s == expected)
}
