//! The console at `/ui/` (and `/`'s way there for browsers): its page and assets, embedded in the binary, served with their caching (`ETag`, immutable hashed names) and the page's security headers.
use super::common::Reply;
use super::problem::ApiError;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{web, HttpRequest, HttpResponse};
use sha2::{Digest, Sha256};
use std::sync::LazyLock;

/// What every console answer carries: scripts, styles, images and requests from this origin
/// only (no inline script or style), never framed, no referrer sent anywhere.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; frame-ancestors 'none'";

/// The page; `%ASSETS%` stands for the assets' folder.
static INDEX: &str = include_str!("console/index.html");

/// The console's files, by name, gzipped by `build.rs`.
static FILES: &[(&str, &[u8])] = &[
    (
        "api.js",
        include_bytes!(concat!(env!("OUT_DIR"), "/api.js.gz")),
    ),
    (
        "app.js",
        include_bytes!(concat!(env!("OUT_DIR"), "/app.js.gz")),
    ),
    (
        "compare.js",
        include_bytes!(concat!(env!("OUT_DIR"), "/compare.js.gz")),
    ),
    (
        "dom.js",
        include_bytes!(concat!(env!("OUT_DIR"), "/dom.js.gz")),
    ),
    (
        "draft.js",
        include_bytes!(concat!(env!("OUT_DIR"), "/draft.js.gz")),
    ),
    (
        "editor.js",
        include_bytes!(concat!(env!("OUT_DIR"), "/editor.js.gz")),
    ),
    (
        "favicon.svg",
        include_bytes!(concat!(env!("OUT_DIR"), "/favicon.svg.gz")),
    ),
    (
        "fileview.js",
        include_bytes!(concat!(env!("OUT_DIR"), "/fileview.js.gz")),
    ),
    (
        "format.js",
        include_bytes!(concat!(env!("OUT_DIR"), "/format.js.gz")),
    ),
    (
        "historyview.js",
        include_bytes!(concat!(env!("OUT_DIR"), "/historyview.js.gz")),
    ),
    (
        "live.js",
        include_bytes!(concat!(env!("OUT_DIR"), "/live.js.gz")),
    ),
    (
        "patch.js",
        include_bytes!(concat!(env!("OUT_DIR"), "/patch.js.gz")),
    ),
    (
        "proposals.js",
        include_bytes!(concat!(env!("OUT_DIR"), "/proposals.js.gz")),
    ),
    (
        "restore.js",
        include_bytes!(concat!(env!("OUT_DIR"), "/restore.js.gz")),
    ),
    (
        "session.js",
        include_bytes!(concat!(env!("OUT_DIR"), "/session.js.gz")),
    ),
    (
        "style.css",
        include_bytes!(concat!(env!("OUT_DIR"), "/style.css.gz")),
    ),
    (
        "sync.js",
        include_bytes!(concat!(env!("OUT_DIR"), "/sync.js.gz")),
    ),
    (
        "textdiff.js",
        include_bytes!(concat!(env!("OUT_DIR"), "/textdiff.js.gz")),
    ),
    (
        "views.js",
        include_bytes!(concat!(env!("OUT_DIR"), "/views.js.gz")),
    ),
    (
        "yaml.js",
        include_bytes!(concat!(env!("OUT_DIR"), "/yaml.js.gz")),
    ),
];

/// The page with its assets' folder filled in, and the entity tags.
struct Console {
    /// A hash of every file: the assets' folder is `/ui/assets/<version>/`, so a new build
    /// gets new URLs and a browser may keep the old ones forever.
    version: String,
    index: web::Bytes,
    index_etag: HeaderValue,
    /// The assets' tags: gzipped as stored, and decompressed for a client that takes no
    /// gzip (two representations, two tags).
    asset_etag_gzip: HeaderValue,
    asset_etag: HeaderValue,
}

static CONSOLE: LazyLock<Console> = LazyLock::new(|| {
    let mut hash = Sha256::new();
    for (name, bytes) in FILES {
        hash.update((name.len() as u64).to_le_bytes());
        hash.update(name.as_bytes());
        hash.update((bytes.len() as u64).to_le_bytes());
        hash.update(bytes);
    }
    hash.update(INDEX.as_bytes());
    let digest = hash.finalize();
    let version: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    let index = INDEX.replace("%ASSETS%", &format!("/ui/assets/{version}"));
    let tag = |t: String| HeaderValue::from_str(&t).expect("hex in quotes");
    Console {
        index_etag: tag(format!("\"ui-{version}\"")),
        asset_etag_gzip: tag(format!("\"{version}-gz\"")),
        asset_etag: tag(format!("\"{version}\"")),
        index: web::Bytes::from(index),
        version,
    }
});

/// The headers of every console answer.
fn page_headers(mut res: HttpResponse) -> HttpResponse {
    let headers = res.headers_mut();
    for (name, value) in [
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        ),
        (
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
    ] {
        headers.insert(name, value);
    }
    res
}

/// True when the request's `If-None-Match` names `etag` (or is `*`).
fn fresh(req: &HttpRequest, etag: &HeaderValue) -> bool {
    req.headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|list| {
            list.split(',')
                .map(str::trim)
                .any(|t| t == "*" || t.trim_start_matches("W/").as_bytes() == etag.as_bytes())
        })
}

/// `/`: a browser (an `Accept` that prefers HTML) is sent to the console with a 303; any
/// other client gets the 404 of every unknown path, as before the console pointed there.
pub(super) async fn root(req: HttpRequest) -> Reply {
    if !super::views::prefers(&req, "text/html") {
        return Err(ApiError::NotFound(req.path().to_owned()));
    }
    Ok(page_headers(
        HttpResponse::SeeOther()
            .insert_header((header::LOCATION, "/ui/"))
            .finish(),
    ))
}

pub(super) async fn to_index() -> HttpResponse {
    page_headers(
        HttpResponse::PermanentRedirect()
            .insert_header((header::LOCATION, "/ui/"))
            .finish(),
    )
}

/// The page: revalidated on every load (`no-cache`), so that a new build's assets are
/// picked up at once.
pub(super) async fn index(req: HttpRequest) -> HttpResponse {
    let console = &*CONSOLE;
    let body = console.index.clone();
    let html = "text/html; charset=utf-8";
    cached(&req, &console.index_etag, "no-cache", html, body)
}

/// An asset of this build, kept by browsers for a year. Under another build's folder (a
/// page from another instance during a rolling deploy) the same name gets this build's
/// bytes, revalidated each time, never kept; an unknown name is 404.
pub(super) async fn asset(req: HttpRequest, path: web::Path<(String, String)>) -> Reply {
    let (version, name) = path.into_inner();
    let console = &*CONSOLE;
    let Some((name, bytes)) = FILES.iter().find(|(n, _)| *n == name) else {
        return Err(ApiError::NotFound(req.path().to_owned()));
    };
    let caching = if version == console.version {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    let (body, etag, encoding) = if accepts_gzip(&req) {
        let body = web::Bytes::from_static(bytes);
        (body, &console.asset_etag_gzip, Some("gzip"))
    } else {
        (web::Bytes::from(gunzip(bytes)), &console.asset_etag, None)
    };
    let mut res = cached(&req, etag, caching, content_type(name), body);
    let headers = res.headers_mut();
    headers.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    if let Some(encoding) = encoding {
        headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static(encoding));
    }
    Ok(res)
}

/// Whether `Accept-Encoding` takes gzip (and does not refuse it with `q=0`).
fn accepts_gzip(req: &HttpRequest) -> bool {
    req.headers()
        .get(header::ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|list| {
            list.split(',').any(|coding| {
                let mut parts = coding.split(';').map(str::trim);
                let name = parts.next().unwrap_or("");
                let refused = parts.any(|p| {
                    p.strip_prefix("q=")
                        .is_some_and(|q| q.parse::<f32>().is_ok_and(|q| q <= 0.0))
                });
                (name.eq_ignore_ascii_case("gzip") || name == "*") && !refused
            })
        })
}

/// An asset's bytes as written, for a client that takes no gzip.
fn gunzip(gz: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(gz.len() * 4);
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(gz), &mut out)
        .expect("build.rs wrote valid gzip");
    out
}

/// 304 when the request names `etag`, else 200 with `body`; the page's headers either way.
fn cached(
    req: &HttpRequest,
    etag: &HeaderValue,
    cache_control: &'static str,
    content_type: &'static str,
    body: web::Bytes,
) -> HttpResponse {
    let not_modified = fresh(req, etag);
    let mut res = if not_modified {
        HttpResponse::NotModified()
    } else {
        HttpResponse::Ok()
    };
    res.insert_header((header::ETAG, etag.clone()))
        .insert_header((header::CACHE_CONTROL, cache_control));
    let res = if not_modified {
        res.finish()
    } else {
        res.content_type(content_type).body(body)
    };
    page_headers(res)
}

fn content_type(name: &str) -> &'static str {
    match name.rsplit_once('.').map(|(_, ext)| ext) {
        Some("js") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_of_the_console_folder_is_served_and_the_page_names_only_served_ones() {
        let folder = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/http/console");
        let mut on_disk: Vec<String> = std::fs::read_dir(folder)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n != "index.html")
            .collect();
        on_disk.sort();
        let served: Vec<String> = FILES.iter().map(|(n, _)| n.to_string()).collect();
        assert_eq!(served, on_disk, "FILES lists the folder, sorted");
        let page = String::from_utf8(CONSOLE.index.to_vec()).unwrap();
        assert!(!page.contains("%ASSETS%"));
        for link in page
            .split(&format!("/ui/assets/{}/", CONSOLE.version))
            .skip(1)
        {
            let name = link.split('"').next().unwrap();
            assert!(FILES.iter().any(|(n, _)| *n == name), "{name}");
        }
    }

    #[test]
    fn each_asset_is_its_file_gzipped() {
        let folder = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/http/console");
        for (name, gz) in FILES {
            assert_eq!(
                gunzip(gz),
                std::fs::read(folder.join(name)).unwrap(),
                "{name}"
            );
        }
    }

    #[actix_web::test]
    async fn the_root_sends_browsers_to_the_console_and_others_get_a_404() {
        let get = |accept: Option<&str>| {
            let mut req = actix_web::test::TestRequest::get().uri("/");
            if let Some(accept) = accept {
                req = req.insert_header((header::ACCEPT, accept));
            }
            req.to_http_request()
        };
        let chromium = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";
        let res = root(get(Some(chromium))).await.unwrap();
        assert_eq!(res.status(), 303);
        let headers = res.headers();
        assert_eq!(headers.get(header::LOCATION).unwrap(), "/ui/");
        assert_eq!(
            headers.get(header::CONTENT_SECURITY_POLICY).unwrap(),
            CONTENT_SECURITY_POLICY
        );
        for accept in [None, Some("*/*"), Some("application/json")] {
            assert!(
                matches!(root(get(accept)).await, Err(ApiError::NotFound(_))),
                "{accept:?}"
            );
        }
    }

    #[test]
    fn gzip_is_taken_unless_refused() {
        let with = |v: &str| {
            actix_web::test::TestRequest::default()
                .insert_header((header::ACCEPT_ENCODING, v))
                .to_http_request()
        };
        assert!(accepts_gzip(&with("gzip, deflate, br, zstd")));
        assert!(accepts_gzip(&with("GZIP;q=0.5")));
        assert!(accepts_gzip(&with("*")));
        assert!(!accepts_gzip(&with("gzip;q=0, br")));
        assert!(!accepts_gzip(&with("identity")));
        assert!(!accepts_gzip(
            &actix_web::test::TestRequest::default().to_http_request()
        ));
    }

    #[test]
    fn if_none_match_lists_are_read_as_rfc_9110_says() {
        let tag = HeaderValue::from_static("\"abc\"");
        let with = |v: &str| {
            actix_web::test::TestRequest::default()
                .insert_header((header::IF_NONE_MATCH, v))
                .to_http_request()
        };
        assert!(fresh(&with("\"abc\""), &tag));
        assert!(fresh(&with("\"x\", W/\"abc\""), &tag));
        assert!(fresh(&with("*"), &tag));
        assert!(!fresh(&with("\"abcd\""), &tag));
        assert!(!fresh(
            &actix_web::test::TestRequest::default().to_http_request(),
            &tag
        ));
    }
}
