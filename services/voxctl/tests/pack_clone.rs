//! `voxctl pack clone|clones|import` against a real `voxpool-catalog` process (SQLite, a file
//! blob store, a pools config whose ElevenLabs upstreams declare clone scopes). No synthesis
//! replica runs, so no vendor step is taken: the clones stay PENDING and imports REQUESTED,
//! which is what these commands show and change (one test leases a CREATE through CloneWork
//! as a replica would, so a delete must wait for it).
//!
//! Needs the catalog binary next to voxctl's: `cargo build -p voxpool-catalog --bins`
//! (`cargo test --workspace` builds it).

use std::{
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
};

const ADMIN_TOKEN: &str = "voxctl-pack-clone-admin-token";

/// Two clone scopes on the ElevenLabs pool (team-a: 2 slots, team-b: 1), an upstream without
/// cloning, and a pool of a provider no scope is declared for.
const POOLS: &str = r#"
[[pools]]
id = "eleven"
provider = "elevenlabs"
[[pools.upstreams]]
id = "team-a"
clone = { slots = 2 }
[[pools.upstreams.keys]]
id = "k1"
capacity = 2
[[pools.upstreams]]
id = "team-b"
clone = { slots = 1 }
[[pools.upstreams.keys]]
id = "k1"
capacity = 2
[[pools.upstreams]]
id = "plain"
[[pools.upstreams.keys]]
id = "k1"
capacity = 2
[[pools]]
id = "espeak-local"
provider = "espeak"
[[pools.upstreams]]
id = "local"
[[pools.upstreams.keys]]
id = "k"
capacity = 2
"#;

/// A running catalog; killed on drop.
struct Catalog {
    child: Child,
    url: String,
    dir: tempfile::TempDir,
}

impl Drop for Catalog {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn catalog_bin() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_BIN_EXE_voxctl"));
    let bin = here.parent().expect("profile dir").join("voxpool-catalog");
    assert!(
        bin.is_file(),
        "{} not found: run `cargo build -p voxpool-catalog --bins` first",
        bin.display()
    );
    bin
}

fn start_catalog() -> Catalog {
    let dir = tempfile::tempdir().expect("tempdir");
    let pools = dir.path().join("pools.toml");
    std::fs::write(&pools, POOLS).expect("write pools");
    let mut child = Command::new(catalog_bin())
        .args(["--listen", "127.0.0.1:0", "--database"])
        .arg(format!(
            "sqlite://{}?mode=rwc",
            dir.path().join("catalog.db").display()
        ))
        .arg("--blob-store")
        .arg(format!("file://{}", dir.path().join("blobs").display()))
        .arg("--config")
        .arg(&pools)
        .env("VOXPOOL_ADMIN_TOKEN", ADMIN_TOKEN)
        .env_remove("VOXPOOL_DATABASE")
        .env_remove("VOXPOOL_CONFIG")
        .env_remove("VOXPOOL_POOLS_CONFIG")
        .env_remove("VOXPOOL_ADMIN_TOKEN_FILE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start voxpool-catalog");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the catalog's address line");
    let addr = line
        .split_whitespace()
        .last()
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_owned();
    Catalog {
        child,
        url: format!("http://{addr}"),
        dir,
    }
}

/// What one voxctl run answered.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn ok(self) -> Self {
        assert_eq!(
            self.code, 0,
            "exit {}; stdout:\n{}\nstderr:\n{}",
            self.code, self.stdout, self.stderr
        );
        self
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("{e}: not JSON:\n{}", self.stdout))
    }
}

impl Catalog {
    /// `voxctl ARGS` against this catalog with the admin token from the environment.
    fn voxctl(&self, args: &[&str]) -> Run {
        self.voxctl_with_token(Some(ADMIN_TOKEN), args)
    }

    fn voxctl_with_token(&self, token: Option<&str>, args: &[&str]) -> Run {
        let mut command = Command::new(env!("CARGO_BIN_EXE_voxctl"));
        command
            .args(args)
            .env("VOXPOOL_CATALOG", &self.url)
            .env_remove("VOXPOOL_ADMIN_TOKEN")
            .env_remove("VOXPOOL_CLIENT_TOKEN")
            .stdin(Stdio::null());
        if let Some(token) = token {
            command.env("VOXPOOL_ADMIN_TOKEN", token);
        }
        let Output {
            status,
            stdout,
            stderr,
        } = command.output().expect("run voxctl");
        Run {
            code: status.code().expect("an exit code"),
            stdout: String::from_utf8(stdout).expect("utf-8 stdout"),
            stderr: String::from_utf8(stderr).expect("utf-8 stderr"),
        }
    }

    /// A managed clone pack (kind CLONED, no voice id, no upstream ids) on the ElevenLabs pool
    /// with one reference clip, both through voxctl; its id. `n` makes its identity its own.
    fn managed_clone(&self, n: u32) -> String {
        let extra = format!("n={n}");
        let created = self
            .voxctl(&[
                "pack",
                "create",
                "--display-name",
                &format!("Narrator {n}"),
                "--provider",
                "elevenlabs",
                "--model",
                "eleven_multilingual_v2",
                "--tts-model-id",
                "eleven",
                "--kind",
                "CLONED",
                "--locale",
                "en-US",
                "--extra",
                &extra,
            ])
            .ok();
        let id = created.stdout.trim().to_owned();
        assert!(id.starts_with("vp_"), "{}", created.stdout);
        let clip = write_clip(self.dir.path(), n);
        let added = self
            .voxctl(&[
                "pack",
                "add-reference",
                &id,
                clip.to_str().expect("utf-8 path"),
                "--transcript",
                "The quick brown fox jumps over the lazy dog.",
            ])
            .ok();
        assert!(
            added.stdout.trim().starts_with("sha256:"),
            "{}",
            added.stdout
        );
        id
    }
}

/// A 1.5 s 16 kHz mono WAV tone; `n` sets its pitch so every clip is its own.
fn write_clip(dir: &Path, n: u32) -> PathBuf {
    let path = dir.join(format!("clip-{n}.wav"));
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: 16_000,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut writer = hound::WavWriter::create(&path, spec).expect("create wav");
    let hz = 220.0 + 20.0 * f64::from(n);
    for i in 0..24_000u32 {
        let t = f64::from(i) / 16_000.0;
        let sample = (t * hz * std::f64::consts::TAU).sin() * 8_000.0;
        writer.write_sample(sample as i16).expect("sample");
    }
    writer.finalize().expect("finish wav");
    path
}

/// The rows of a clones table below its header, each split into its cells.
fn rows(table: &str) -> Vec<Vec<String>> {
    let mut lines = table.lines();
    let header = lines.next().expect("a header");
    assert!(
        header.starts_with("SCOPE") && header.contains("VENDOR VOICE ID"),
        "{table}"
    );
    lines
        .map(|l| {
            l.split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .collect()
}

#[test]
fn clone_lists_the_pending_clones_and_delete_removes_one_never_made() {
    let catalog = start_catalog();
    let pack = catalog.managed_clone(1);

    let cloned = catalog
        .voxctl(&["pack", "clone", &pack, "--scope", "team-a"])
        .ok();
    let table = rows(&cloned.stdout);
    assert_eq!(table.len(), 1, "{}", cloned.stdout);
    assert_eq!(
        table[0][..3],
        ["team-a", "PENDING", "-"],
        "{}",
        cloned.stdout
    );
    assert!(
        cloned.stderr.contains("1 clone(s): 1 PENDING"),
        "{}",
        cloned.stderr
    );

    // A second scope as JSON; the first one is left alone (asking again is idempotent).
    let both = catalog
        .voxctl(&[
            "pack", "clone", &pack, "--scope", "team-a", "--scope", "team-b", "--json",
        ])
        .ok()
        .json();
    let clones = both["clones"].as_array().expect("clones[]");
    let scopes: Vec<&str> = clones
        .iter()
        .map(|c| c["scope"].as_str().expect("scope"))
        .collect();
    assert_eq!(scopes, ["team-a", "team-b"], "{both}");
    for clone in clones {
        assert_eq!(clone["packId"], pack.as_str(), "{clone}");
        assert_eq!(clone["state"], "PENDING", "{clone}");
        assert_eq!(clone["vendorVoiceId"], "", "{clone}");
        assert!(
            clone["createdAt"]
                .as_str()
                .is_some_and(|t| t.ends_with('Z')),
            "{clone}"
        );
        assert!(
            clone["lastUsedAt"].is_null() && clone["expiresAt"].is_null(),
            "{clone}"
        );
        assert_eq!(clone["error"], "", "{clone}");
    }

    let listed = catalog.voxctl(&["pack", "clones", &pack]).ok();
    let listed_scopes: Vec<String> = rows(&listed.stdout)
        .into_iter()
        .map(|r| r[0].clone())
        .collect();
    assert_eq!(listed_scopes, ["team-a", "team-b"], "{}", listed.stdout);
    assert!(
        listed.stderr.contains("2 clone(s): 2 PENDING"),
        "{}",
        listed.stderr
    );
    let listed_json = catalog
        .voxctl(&["pack", "clones", &pack, "--json"])
        .ok()
        .json();
    assert_eq!(listed_json, both, "ListClones answers what CloneVoice did");

    // No vendor call was made for team-b (no synthesis replica runs), so it goes at once.
    let deleted = catalog
        .voxctl(&["pack", "clones", &pack, "--delete", "team-b"])
        .ok();
    assert!(
        deleted.stderr.contains("deleted the clone in team-b"),
        "{}",
        deleted.stderr
    );
    let left: Vec<String> = rows(&deleted.stdout)
        .into_iter()
        .map(|r| r[0].clone())
        .collect();
    assert_eq!(left, ["team-a"], "{}", deleted.stdout);
    let after = catalog
        .voxctl(&["pack", "clones", &pack, "--json"])
        .ok()
        .json();
    assert_eq!(after["clones"].as_array().map(Vec::len), Some(1), "{after}");
    assert_eq!(after["clones"][0]["scope"], "team-a", "{after}");

    let again = catalog.voxctl(&["pack", "clones", &pack, "--delete", "team-b"]);
    assert_eq!(again.code, 1, "{}", again.stderr);
    assert!(
        again.stderr.contains("DeleteClone (catalog at ")
            && again.stderr.contains("NOT_FOUND CLONE_NOT_FOUND"),
        "{}",
        again.stderr
    );
}

#[test]
fn refusals_show_the_code_the_reason_and_the_catalogs_message() {
    let catalog = start_catalog();
    let pack = catalog.managed_clone(2);

    let unknown = catalog.voxctl(&["pack", "clone", &pack, "--scope", "nowhere"]);
    assert_eq!(unknown.code, 1, "{}", unknown.stderr);
    assert!(unknown.stdout.is_empty(), "{}", unknown.stdout);
    assert!(
        unknown.stderr.contains("CloneVoice (catalog at ")
            && unknown.stderr.contains("INVALID_ARGUMENT")
            && unknown.stderr.contains("nowhere")
            && unknown.stderr.contains("is no clone scope of pool")
            && unknown.stderr.contains("team-a"),
        "{}",
        unknown.stderr
    );
    let none = catalog
        .voxctl(&["pack", "clones", &pack, "--json"])
        .ok()
        .json();
    assert_eq!(
        none,
        serde_json::json!({"clones": []}),
        "a refused clone makes no row"
    );

    // team-b has one slot: the first pack takes it, a second is refused naming the scope.
    catalog
        .voxctl(&["pack", "clone", &pack, "--scope", "team-b"])
        .ok();
    let other = catalog.managed_clone(3);
    let full = catalog.voxctl(&["pack", "clone", &other, "--scope", "team-b"]);
    assert_eq!(full.code, 1, "{}", full.stderr);
    assert!(
        full.stderr.contains("RESOURCE_EXHAUSTED CLONE_SLOTS_FULL")
            && full.stderr.contains("team-b"),
        "{}",
        full.stderr
    );

    // A pack with a vendor voice of its own is no managed clone.
    let standard = catalog
        .voxctl(&[
            "pack",
            "create",
            "--display-name",
            "Plain",
            "--provider",
            "espeak",
            "--model",
            "espeak-ng",
            "--voice-id",
            "en-us",
            "--tts-model-id",
            "espeak-local",
        ])
        .ok();
    let not_managed = catalog.voxctl(&["pack", "clone", standard.stdout.trim()]);
    assert_eq!(not_managed.code, 1, "{}", not_managed.stderr);
    assert!(
        not_managed
            .stderr
            .contains("FAILED_PRECONDITION CLONE_NOT_MANAGED"),
        "{}",
        not_managed.stderr
    );

    // Nor has it a clone to delete: it says so rather than "no clone in that scope".
    let no_clone = catalog.voxctl(&[
        "pack",
        "clones",
        standard.stdout.trim(),
        "--delete",
        "team-a",
    ]);
    assert_eq!(no_clone.code, 1, "{}", no_clone.stderr);
    assert!(
        no_clone.stderr.contains("DeleteClone (catalog at ")
            && no_clone
                .stderr
                .contains("FAILED_PRECONDITION CLONE_NOT_MANAGED"),
        "{}",
        no_clone.stderr
    );

    let unauthenticated = catalog.voxctl_with_token(None, &["pack", "clones", &pack]);
    assert_eq!(unauthenticated.code, 1, "{}", unauthenticated.stderr);
    assert!(
        unauthenticated.stderr.contains("UNAUTHENTICATED")
            && unauthenticated.stderr.contains("VOXPOOL_ADMIN_TOKEN"),
        "{}",
        unauthenticated.stderr
    );

    let usage = catalog.voxctl(&["pack", "clone", &pack, "--max-scopes", "0"]);
    assert_eq!(usage.code, 2, "{}", usage.stderr);
    // Usage lines name the command as written and show the catalog flags as optional.
    for (command, line) in [
        ("clone", "Usage: voxctl pack clone <PACK>"),
        ("clones", "Usage: voxctl pack clones <PACK>"),
        ("import", "Usage: voxctl pack import --pool <POOL>"),
    ] {
        let run = catalog.voxctl(&["pack", command]);
        assert_eq!(run.code, 2, "{}", run.stderr);
        assert!(
            run.stderr.contains(line)
                && run
                    .stderr
                    .contains("[--catalog <CATALOG>] [--admin-token <ADMIN_TOKEN>]"),
            "{}",
            run.stderr
        );
    }
}

/// Leases the due CREATE steps of `scope` as a synthesis replica would (CloneWork.Claim with
/// the admin token), so a delete asked now waits for the worker.
fn claim_creates(url: &str, scope: &str) -> usize {
    use voxpool_proto::catalog::v1::{ClaimCloneWorkRequest, clone_work_client::CloneWorkClient};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let mut client = CloneWorkClient::connect(url.to_owned())
            .await
            .expect("connect");
        let mut request = tonic::Request::new(ClaimCloneWorkRequest {
            worker: "pack-clone-test".into(),
            scopes: vec![scope.to_owned()],
            max: 10,
            lease_ms: 600_000,
        });
        request.metadata_mut().insert(
            "authorization",
            format!("Bearer {ADMIN_TOKEN}").parse().expect("metadata"),
        );
        client
            .claim(request)
            .await
            .expect("claim")
            .into_inner()
            .tasks
            .len()
    })
}

#[test]
fn a_pending_delete_shows_in_the_table_the_tally_and_json() {
    let catalog = start_catalog();
    let pack = catalog.managed_clone(4);
    catalog
        .voxctl(&["pack", "clone", &pack, "--scope", "team-a"])
        .ok();
    assert_eq!(claim_creates(&catalog.url, "team-a"), 1);

    // A worker runs its CREATE: the delete waits for it, and every view says so.
    let deleting = catalog
        .voxctl(&["pack", "clones", &pack, "--delete", "team-a"])
        .ok();
    assert!(
        deleting.stderr.contains("deleting the clone in team-a"),
        "{}",
        deleting.stderr
    );
    let table = rows(&deleting.stdout);
    assert_eq!(
        table[0][..2],
        ["team-a", "PENDING (deleting)"],
        "{}",
        deleting.stdout
    );
    let listed = catalog
        .voxctl(&["pack", "clones", &pack, "--json"])
        .ok()
        .json();
    assert_eq!(listed["clones"][0]["deleting"], true, "{listed}");
    let again = catalog
        .voxctl(&["pack", "clone", &pack, "--scope", "team-a"])
        .ok();
    assert!(
        again.stderr.contains("1 clone(s): 1 PENDING (deleting)"),
        "{}",
        again.stderr
    );
}

#[test]
fn import_shows_the_requested_import_of_each_scope() {
    let catalog = start_catalog();

    let one = catalog
        .voxctl(&["pack", "import", "--pool", "eleven", "--scope", "team-a"])
        .ok();
    let mut lines = one.stdout.lines();
    let header = lines.next().expect("a header");
    assert!(
        header.starts_with("SCOPE") && header.contains("REQUESTED") && header.contains("UNBOUND"),
        "{}",
        one.stdout
    );
    let row: Vec<&str> = lines
        .next()
        .expect("one row")
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(row[..2], ["team-a", "REQUESTED"], "{}", one.stdout);
    assert!(
        row[2].ends_with('Z'),
        "requested at, in UTC: {}",
        one.stdout
    );
    assert!(lines.next().is_none(), "{}", one.stdout);
    assert!(
        one.stderr.contains("run the same command again"),
        "{}",
        one.stderr
    );

    let every = catalog
        .voxctl(&["pack", "import", "--pool", "eleven", "--json"])
        .ok()
        .json();
    let imports = every["imports"].as_array().expect("imports[]");
    let scopes: Vec<&str> = imports
        .iter()
        .map(|i| i["scope"].as_str().expect("scope"))
        .collect();
    assert_eq!(scopes, ["team-a", "team-b"], "{every}");
    for import in imports {
        assert_eq!(import["state"], "REQUESTED", "{import}");
        assert!(import["requestedAt"].is_string(), "{import}");
        assert_eq!(import["bound"], serde_json::json!([]), "{import}");
        assert_eq!(import["unbound"], serde_json::json!([]), "{import}");
    }

    let no_scopes = catalog.voxctl(&["pack", "import", "--pool", "espeak-local"]);
    assert_eq!(no_scopes.code, 1, "{}", no_scopes.stderr);
    assert!(
        no_scopes.stderr.contains("ImportClones (catalog at ")
            && no_scopes.stderr.contains("NO_CLONE_SCOPES"),
        "{}",
        no_scopes.stderr
    );
    let unknown_pool = catalog.voxctl(&["pack", "import", "--pool", "nosuchpool"]);
    assert_eq!(unknown_pool.code, 1, "{}", unknown_pool.stderr);
    assert!(
        unknown_pool.stderr.contains("INVALID_ARGUMENT")
            && unknown_pool.stderr.contains("nosuchpool")
            && unknown_pool.stderr.contains("eleven")
            && !unknown_pool.stderr.contains("NO_CLONE_SCOPES"),
        "{}",
        unknown_pool.stderr
    );
    let unknown_scope = catalog.voxctl(&["pack", "import", "--pool", "eleven", "--scope", "plain"]);
    assert_eq!(unknown_scope.code, 1, "{}", unknown_scope.stderr);
    assert!(
        unknown_scope.stderr.contains("INVALID_ARGUMENT") && unknown_scope.stderr.contains("plain"),
        "{}",
        unknown_scope.stderr
    );
}
