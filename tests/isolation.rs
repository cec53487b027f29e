//! A shared service: what one client or tenant does cannot grow shared state or stall others.
mod common;

use common::TestApp;
use futures_util::StreamExt;

/// The number of series (sample lines) in `/metrics`.
async fn series(app: &TestApp) -> usize {
    let text = app
        .client
        .get(app.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines().filter(|l| !l.starts_with('#')).count()
}

/// Requests without a token, with made-up methods, paths and headers, add no series: every
/// label value comes from a closed set.
#[tokio::test]
async fn made_up_methods_paths_and_headers_add_no_metric_series() {
    let app = TestApp::spawn().await;
    let send = |i: usize| {
        let method = reqwest::Method::from_bytes(format!("XQ{i}").as_bytes()).unwrap();
        let path = match i % 4 {
            0 => format!("/x{i}"),
            1 => format!("/plans/integration-file/{i}"),
            2 => format!("/git/t{i}.git/info/refs"),
            _ => "/plans/integration-file".to_owned(),
        };
        let method = if i % 5 == 0 {
            reqwest::Method::GET
        } else {
            method
        };
        app.client
            .request(method, app.url(&path))
            .header(format!("x-h{i}"), format!("v{i}"))
            .send()
    };
    // One of each kind first, and one read of /metrics, so that the series they add exist.
    for i in 0..20 {
        send(i).await.unwrap();
    }
    series(&app).await;
    let before = series(&app).await;
    let statuses: Vec<u16> = futures_util::stream::iter(20..10_020)
        .map(|i| async move { send(i).await.unwrap().status().as_u16() })
        .buffer_unordered(16)
        .collect()
        .await;
    let odd: std::collections::BTreeSet<_> = statuses
        .iter()
        .filter(|s| ![401, 404, 405].contains(*s))
        .collect();
    assert!(odd.is_empty(), "unexpected statuses {odd:?}");
    let after = series(&app).await;
    assert_eq!(
        after, before,
        "{before} series before, {after} after 10,000 made-up requests"
    );
}
