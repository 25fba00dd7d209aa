//! The operator's console in a real browser: headless Chromium driven over WebDriver
//! (`chromedriver`), against a fixture that only serves and a worker on one SQLite file.
//!
//! Without `chromedriver` on the `PATH` (or at `$CHROMEDRIVER`) the test says so loudly
//! and passes, unless `MCP_TASKS_TEST_BROWSER=required` (CI installs Chromium and sets it).
//! `MCP_TASKS_CONSOLE_SCREENSHOT=PATH` saves a screenshot of the page as a PNG.

mod support;

use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use support::Store;
use support::http::{HttpFixture, TASKS_EXT, json_of, meta, stateless_with};
use tokio::process::{Child, Command};

const TOKEN: &str = "console-browser-token-0123456789";
/// The bound on every wait of this test.
const WITHIN: Duration = Duration::from_secs(30);
/// The key WebDriver names an element by.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A WebDriver session in headless Chromium, through a `chromedriver` process.
struct Browser {
    driver: Child,
    http: reqwest::Client,
    session: String,
}

fn chromedriver() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("CHROMEDRIVER") {
        return Some(PathBuf::from(path));
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("chromedriver"))
            .find(|p| p.is_file())
    })
}

impl Browser {
    async fn start() -> Option<Self> {
        let Some(driver) = chromedriver() else {
            assert_ne!(
                std::env::var("MCP_TASKS_TEST_BROWSER").as_deref(),
                Ok("required"),
                "chromedriver is missing and MCP_TASKS_TEST_BROWSER=required"
            );
            eprintln!(
                "\n\n*** SKIPPED: the console's browser test needs chromedriver and Chromium \
                 (apt-get install chromium chromium-driver) ***\n\n"
            );
            return None;
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Command::new(driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn chromedriver");
        let http = reqwest::Client::new();
        let base = format!("http://127.0.0.1:{port}");
        tokio::time::timeout(WITHIN, async {
            loop {
                if let Ok(r) = http.get(format!("{base}/status")).send().await
                    && r.status().is_success()
                {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await
        .expect("chromedriver answers within 30 s");
        let mut args = vec![
            "--headless=new",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--window-size=1400,1300",
        ];
        // As root (a CI container) Chromium runs only without its sandbox.
        if std::env::var("USER").as_deref() == Ok("root")
            || std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
                s.lines()
                    .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
            })
        {
            args.push("--no-sandbox");
        }
        let mut options = json!({ "args": args });
        if let Ok(binary) = std::env::var("CHROMIUM") {
            options["binary"] = json!(binary);
        } else if std::path::Path::new("/usr/bin/chromium").exists() {
            options["binary"] = json!("/usr/bin/chromium");
        }
        let created: Value = serde_json::from_str(
            &http
                .post(format!("{base}/session"))
                .body(
                    json!({"capabilities": {"alwaysMatch": {
                        "browserName": "chrome",
                        "goog:chromeOptions": options,
                    }}})
                    .to_string(),
                )
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap(),
        )
        .unwrap();
        let session = created["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no WebDriver session: {created}"))
            .to_owned();
        Some(Self {
            driver,
            http,
            session: format!("{base}/session/{session}"),
        })
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut request = self.http.request(method, format!("{}{path}", self.session));
        if let Some(body) = body {
            request = request.body(body.to_string());
        }
        let text = request.send().await.unwrap().text().await.unwrap();
        serde_json::from_str::<Value>(&text).unwrap()["value"].take()
    }

    async fn go(&self, url: &str) {
        self.call(reqwest::Method::POST, "/url", Some(json!({ "url": url })))
            .await;
    }

    /// The element `css` selects, if there is one now.
    async fn find(&self, css: &str) -> Option<String> {
        let found = self
            .call(
                reqwest::Method::POST,
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        found[ELEMENT].as_str().map(str::to_owned)
    }

    /// Waits (bounded) for the element `css` selects.
    async fn wait_for(&self, css: &str) -> String {
        tokio::time::timeout(WITHIN, async {
            loop {
                if let Some(e) = self.find(css).await {
                    return e;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("the page shows no {css} within 30 s"))
    }

    /// Waits (bounded) until nothing matches `css`.
    async fn wait_gone(&self, css: &str) {
        tokio::time::timeout(WITHIN, async {
            while self.find(css).await.is_some() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("the page still shows {css} after 30 s"));
    }

    async fn attribute(&self, element: &str, name: &str) -> Value {
        self.call(
            reqwest::Method::GET,
            &format!("/element/{element}/attribute/{name}"),
            None,
        )
        .await
    }

    async fn click(&self, element: &str) {
        self.call(
            reqwest::Method::POST,
            &format!("/element/{element}/click"),
            Some(json!({})),
        )
        .await;
    }

    /// Clicks the element `css` selects and accepts the confirmation the click opens
    /// (bounded). The live page may draw the element anew between finding and clicking it
    /// (the click then fails on the stale element and opens nothing), so until a
    /// confirmation opens the element is found and clicked again.
    async fn click_and_confirm(&self, css: &str) {
        tokio::time::timeout(WITHIN, async {
            loop {
                let element = self.wait_for(css).await;
                self.click(&element).await;
                for _ in 0..20 {
                    let text = self.call(reqwest::Method::GET, "/alert/text", None).await;
                    if text.is_string() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        })
        .await
        .expect("the page asks for a confirmation");
        self.call(reqwest::Method::POST, "/alert/accept", Some(json!({})))
            .await;
    }

    async fn screenshot(&self) -> Vec<u8> {
        let shot = self.call(reqwest::Method::GET, "/screenshot", None).await;
        base64_decode(shot.as_str().expect("a screenshot"))
    }

    async fn quit(mut self) {
        self.call(reqwest::Method::DELETE, "", None).await;
        let _ = self.driver.start_kill();
        let _ = self.driver.wait().await;
    }
}

/// Standard base64 (what WebDriver screenshots are in).
fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let clean: Vec<u8> = text.bytes().filter(|c| !b"=\n\r".contains(c)).collect();
    let mut out = Vec::with_capacity(clean.len() * 3 / 4);
    for chunk in clean.chunks(4) {
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            n |= u32::from(value(*c)) << (18 - 6 * i);
        }
        out.extend_from_slice(&n.to_be_bytes()[1..chunk.len()]);
    }
    out
}

/// Starts `tool` as a task over MCP (2026-07-28, tasks extension).
async fn start_task(mcp: &str, tool: &str, arguments: Value) -> String {
    let call = json!({"name": tool, "arguments": arguments});
    let meta = meta(json!({"elicitation": {}, "extensions": {TASKS_EXT: {}}}));
    let (status, created) = json_of(
        stateless_with(mcp, 1, "tools/call", call, meta, &[("mcp-name", tool)])
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{created}");
    created["result"]["taskId"].as_str().unwrap().to_owned()
}

async fn status_of(base: &str, id: &str) -> String {
    let (_, task) = json_of(
        reqwest::Client::new()
            .get(format!("{base}/admin/api/tasks/{id}"))
            .header("authorization", format!("Bearer {TOKEN}"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    task["status"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn the_page_shows_a_workers_task_moving_and_cancels_it() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let store = Store::sqlite("console-browser");
    let server = HttpFixture::start(&[
        "--store",
        &store.arg(),
        "--no-execute",
        "--admin-token",
        TOKEN,
    ])
    .await;
    let base = server.url.trim_end_matches("/mcp").to_owned();
    let worker = support::Worker::start(&store, &[]);
    // A few finished tasks, one that fails and one that waits, for the page to show.
    let done = start_task(
        &server.url,
        "durable_sleep",
        json!({"seconds": 0, "label": "warm-up"}),
    )
    .await;
    start_task(&server.url, "protocol_error_job", json!({})).await;
    start_task(
        &server.url,
        "confirm_delete",
        json!({"filename": "report.pdf"}),
    )
    .await;

    browser.go(&format!("{base}/admin#token={TOKEN}")).await;
    // A task created over MCP, run by the worker, is listed among the running ones.
    let id = start_task(
        &server.url,
        "slow_compute",
        json!({"seconds": 20, "label": "nightly"}),
    )
    .await;
    let row = format!("#running tr[data-id=\"{id}\"]");
    browser.wait_for(&row).await;
    // Its progress bar moves, live from the feed.
    let bar = browser.wait_for(&format!("{row} .bar[data-done]")).await;
    let first: f64 = browser
        .attribute(&bar, "data-done")
        .await
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    tokio::time::timeout(WITHIN, async {
        loop {
            let bar = browser.wait_for(&format!("{row} .bar[data-done]")).await;
            let now: f64 = browser
                .attribute(&bar, "data-done")
                .await
                .as_str()
                .unwrap_or("0")
                .parse()
                .unwrap_or(0.0);
            if now > first {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("the progress bar moves");
    // Failed and waiting tasks have their tables.
    browser.wait_for("#failed tbody tr").await;
    browser.wait_for("#waiting tbody tr").await;
    browser
        .wait_for(&format!("#all tr[data-id=\"{done}\"]"))
        .await;
    if let Ok(path) = std::env::var("MCP_TASKS_CONSOLE_SCREENSHOT") {
        // Let a stats event or two fill the counts and the sparkline.
        tokio::time::sleep(Duration::from_secs(3)).await;
        std::fs::write(&path, browser.screenshot().await).expect("write the screenshot");
        eprintln!("screenshot saved to {path}");
    }
    // Cancel from the page: confirmed, the task settles and leaves the running list.
    browser
        .click_and_confirm(&format!("{row} button.cancel"))
        .await;
    browser.wait_gone(&row).await;
    assert_eq!(status_of(&base, &id).await, "cancelled");
    assert!(worker.claimed(&id), "the worker ran the task");
    // Its detail lists the history the store kept: created, then cancelled.
    let link = browser
        .wait_for(&format!("#all tr[data-id=\"{id}\"] a.id"))
        .await;
    browser.click(&link).await;
    let last = browser
        .wait_for("#d-history tbody tr:last-child td:nth-child(2)")
        .await;
    let text = browser
        .call(reqwest::Method::GET, &format!("/element/{last}/text"), None)
        .await;
    assert_eq!(text, "cancelled", "the last change in the detail's history");
    let first = browser
        .wait_for("#d-history tbody tr:first-child td:nth-child(2)")
        .await;
    let text = browser
        .call(
            reqwest::Method::GET,
            &format!("/element/{first}/text"),
            None,
        )
        .await;
    assert_eq!(text, "created (working)");

    // Pause a tool from the page: confirmed, the page says so, and a new call of the tool
    // starts no task (the tool's mode lets it run at once instead).
    browser
        .click_and_confirm("#by-tool tr[data-key=\"durable_sleep\"] button.pause")
        .await;
    let state = browser.wait_for("#controls-state").await;
    tokio::time::timeout(WITHIN, async {
        loop {
            let text = browser
                .call(
                    reqwest::Method::GET,
                    &format!("/element/{state}/text"),
                    None,
                )
                .await;
            if text.as_str().is_some_and(|t| t.contains("durable_sleep")) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the page shows the tool paused");
    let call = json!({"name": "durable_sleep", "arguments": {"seconds": 0, "label": "paused"}});
    let meta = meta(json!({"extensions": {TASKS_EXT: {}}}));
    let (status, answer) = json_of(
        stateless_with(
            &server.url,
            2,
            "tools/call",
            call,
            meta,
            &[("mcp-name", "durable_sleep")],
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert!(
        answer["result"].get("taskId").is_none(),
        "a paused tool starts no task: {answer}"
    );
    assert_eq!(answer["result"]["resultType"], "complete", "{answer}");
    browser.quit().await;
    worker.kill().await;
    server.kill().await;
}

#[test]
fn base64_decodes() {
    assert_eq!(base64_decode("aGVsbG8="), b"hello");
    assert_eq!(base64_decode("aGk="), b"hi");
    assert_eq!(base64_decode("YWJj"), b"abc");
}
