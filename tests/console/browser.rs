//! A headless Chromium driven over WebDriver (chromedriver on a port it picks), with a
//! download directory of its own, and the test's bounded wait for a condition.

use std::{
    io::{BufRead, BufReader},
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;

/// How long a condition may take before the test fails.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// Where screenshots go: docs/console/ with `VOXPOOL_UPDATE_SCREENSHOTS=1`, else target/.
fn screenshot_dir() -> PathBuf {
    let root = voxpool_e2e::workspace_root();
    let dir = if std::env::var_os("VOXPOOL_UPDATE_SCREENSHOTS").is_some() {
        root.join("docs/console")
    } else {
        root.join("target/console-screenshots")
    };
    std::fs::create_dir_all(&dir).expect("screenshot dir");
    dir
}

/// One browser session.
pub struct Browser {
    /// The WebDriver session.
    pub client: Client,
    driver: Child,
    /// Where the browser saves downloads.
    pub downloads: tempfile::TempDir,
}

impl Drop for Browser {
    fn drop(&mut self) {
        // chromedriver leads a process group of its own, which holds the Chromium it started:
        // killing the group leaves no browser behind (killing chromedriver alone orphaned it).
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.driver.id())])
            .status();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session.
    pub async fn start() -> Self {
        let mut driver = Command::new("chromedriver")
            .arg("--port=0")
            .process_group(0)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver (apt-get install chromium chromium-driver; make setup does)");
        let mut out = BufReader::new(driver.stdout.take().expect("stdout"));
        let port = loop {
            let mut line = String::new();
            assert!(
                out.read_line(&mut line).expect("chromedriver output") > 0,
                "chromedriver exited before saying its port"
            );
            if let Some(rest) = line.split("started successfully on port ").nth(1) {
                break rest.trim().trim_end_matches('.').to_owned();
            }
        };
        // Keep reading its stdout so it never blocks on a full pipe.
        std::thread::spawn(move || for _ in out.lines() {});
        let downloads = tempfile::tempdir().expect("download dir");
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--window-size=1280,1000", "--autoplay-policy=no-user-gesture-required"],
                "prefs": {
                    "download.default_directory": downloads.path(),
                    "download.prompt_for_download": false,
                }
            }),
        );
        let client = ClientBuilder::new(HttpConnector::new())
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("a WebDriver session");
        Self {
            client,
            driver,
            downloads,
        }
    }

    /// Opens `url`.
    pub async fn goto(&self, url: &str) {
        self.client
            .goto(url)
            .await
            .unwrap_or_else(|e| panic!("goto {url}: {e}"));
    }

    /// Signs in at `base` with `token`; asserts the pools page opens.
    pub async fn sign_in(&self, base: &str, token: &str) {
        self.goto(&format!("{base}/login")).await;
        self.find("#token")
            .await
            .send_keys(token)
            .await
            .expect("type the token");
        self.find("form.login button")
            .await
            .click()
            .await
            .expect("submit");
        self.until("the pools page after sign-in", || async {
            self.client
                .current_url()
                .await
                .is_ok_and(|u| u.path() == "/pools")
        })
        .await;
    }

    /// The element matching `css`, waiting for it to appear.
    pub async fn find(&self, css: &str) -> fantoccini::elements::Element {
        self.client
            .wait()
            .at_most(DEADLINE)
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no element {css}: {e}"))
    }

    /// The page's text.
    pub async fn text(&self) -> String {
        self.find("body").await.text().await.expect("page text")
    }

    /// Waits until `condition` holds, at most [`DEADLINE`]; fails naming `what`.
    pub async fn until<F, Fut>(&self, what: &str, mut condition: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let start = Instant::now();
        while !condition().await {
            if start.elapsed() >= DEADLINE {
                let url = self.client.current_url().await.map(|u| u.to_string());
                let source = self.client.source().await.unwrap_or_default();
                panic!(
                    "timed out waiting for {what}; the browser is at {url:?} showing:\n{source}"
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Saves a screenshot of the page as `<name>.png` (module doc: where).
    pub async fn screenshot(&self, name: &str) {
        let png = self.client.screenshot().await.expect("screenshot");
        std::fs::write(screenshot_dir().join(format!("{name}.png")), png)
            .expect("write screenshot");
    }

    /// The first file downloaded into [`Browser::downloads`] whose name ends with `suffix`,
    /// once complete.
    pub async fn downloaded(&self, suffix: &str) -> PathBuf {
        let dir: &Path = self.downloads.path();
        let start = Instant::now();
        loop {
            let found = std::fs::read_dir(dir)
                .expect("download dir")
                .filter_map(Result::ok)
                .map(|e| e.path())
                .find(|p| p.to_string_lossy().ends_with(suffix));
            if let Some(path) = found {
                return path;
            }
            assert!(start.elapsed() < DEADLINE, "no download ending in {suffix}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
