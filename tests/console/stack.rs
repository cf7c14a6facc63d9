//! The console's test stack on real binaries, as `make run` has it: a memory-store scheduler
//! and a catalog seeded with deploy/config/packs.toml over deploy/config/example.toml (plus a
//! pool of the test's own, `console-watch`, that nothing else leases from), synthesis on the
//! local espeak-ng engine with its audio cache on, optionally jobs over a redis-server, and
//! the console in front of them.

use std::{path::PathBuf, process::Command};

use voxpool_e2e::{Service, binary, start, workspace_root};
use voxpool_testkit::RedisServer;

/// The admin token every service and the console accept.
pub const ADMIN: &str = "console-test-admin-token-0123456789";
/// The console's read-only token.
pub const VIEWER: &str = "console-test-viewer-token-0123456789";
/// The pool whose bar the tests watch.
pub const WATCH_POOL: &str = "console-watch";
/// Its one key.
pub const WATCH_KEY: &str = "watch/key-1";

const WATCH_POOL_TOML: &str = r#"
[[pools]]
id = "console-watch"
provider = "espeak"
model = "espeak-ng"

[[pools.upstreams]]
id = "watch"

[[pools.upstreams.keys]]
id = "key-1"
capacity = 4
"#;

/// The running stack.
pub struct Stack {
    /// The scheduler.
    pub scheduler: Service,
    /// The catalog.
    pub catalog: Service,
    /// Synthesis.
    pub synthesis: Service,
    /// Jobs and its Redis, when asked for.
    pub jobs: Option<(Service, RedisServer)>,
    /// The console.
    pub console: Service,
    /// Scratch space (config, database, blob store).
    pub dir: tempfile::TempDir,
}

fn admin(mut c: Command) -> Command {
    c.env("VOXPOOL_ADMIN_TOKEN", ADMIN);
    c
}

impl Stack {
    /// Starts it; with `jobs`, the jobs service too.
    pub fn start(jobs: bool) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = workspace_root();
        let example = std::fs::read_to_string(root.join("deploy/config/example.toml"))
            .expect("example config");
        let config = dir.path().join("config.toml");
        std::fs::write(&config, format!("{example}\n{WATCH_POOL_TOML}")).expect("config");
        let blobs = dir.path().join("blobs");
        std::fs::create_dir_all(&blobs).expect("blob dir");
        let store = format!("file://{}", blobs.display());
        let db = format!(
            "sqlite://{}?mode=rwc",
            dir.path().join("catalog.db").display()
        );
        for args in [
            vec!["--database", &db, "migrate"],
            vec![
                "--database",
                &db,
                "--config",
                config.to_str().expect("utf-8 path"),
                "seed",
                "deploy/config/packs.toml",
            ],
        ] {
            let out = Command::new(binary("voxpool-catalog"))
                .args(&args)
                .current_dir(&root)
                .env("VOXPOOL_BLOB_STORE", &store)
                .output()
                .expect("catalog");
            assert!(out.status.success(), "catalog {args:?}: {out:?}");
        }
        let mut c = admin(Command::new(binary("voxpool-scheduler")));
        c.arg("--config")
            .arg(&config)
            .args(["--store", "memory", "--listen", "127.0.0.1:0"])
            .env("VOXPOOL_SCHEDULER__RECOVERY_WINDOW_MS", "0");
        let scheduler = start(c);
        let mut c = admin(Command::new(binary("voxpool-catalog")));
        c.args(["--database", &db, "--listen", "127.0.0.1:0", "--config"])
            .arg(&config)
            .env("VOXPOOL_BLOB_STORE", &store);
        let catalog = start(c);
        let mut c = admin(Command::new(binary("voxpool-synthesis")));
        c.arg("--config").arg(&config).args([
            "--listen",
            "127.0.0.1:0",
            "--cache",
            "on",
            "--blob-store",
            &store,
            "--scheduler",
            &format!("http://{}", scheduler.addr),
            "--catalog",
            &format!("http://{}", catalog.addr),
        ]);
        let synthesis = start(c);
        let jobs = jobs.then(|| {
            let redis = RedisServer::start();
            let mut c = Command::new(binary("voxpool-jobs"));
            c.args(["--listen", "127.0.0.1:0", "--store", &redis.url()])
                .args(["--synthesis", &format!("http://{}", synthesis.addr)])
                .args(["--blob-store", &store, "--concurrency", "1"])
                .arg("--config")
                .arg(&config)
                .env("VOXPOOL_CLIENT_TOKEN", voxpool_e2e::JOBS_TOKEN);
            (start(c), redis)
        });
        let mut c = admin(Command::new(binary("voxpool-console")));
        c.args(["--listen", "127.0.0.1:0"])
            .args(["--scheduler", &format!("http://{}", scheduler.addr)])
            .args(["--catalog", &format!("http://{}", catalog.addr)])
            .args(["--synthesis", &format!("http://{}", synthesis.addr)])
            .env("VOXPOOL_CONSOLE_TOKEN", VIEWER)
            .env("VOXPOOL_CLIENT_TOKEN", voxpool_e2e::VOXCTL_TOKEN);
        if let Some((j, _)) = &jobs {
            c.args(["--jobs", &format!("http://{}", j.addr)]);
        }
        let console = start(c);
        Self {
            scheduler,
            catalog,
            synthesis,
            jobs,
            console,
            dir,
        }
    }

    /// The console's base URL.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.console.addr)
    }

    /// A scratch file path.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}
