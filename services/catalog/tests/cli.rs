//! The `voxpool-catalog` binary: subcommands, exit codes and one-line reasons.

mod common;

use std::process::{Command, Output};

use common::{Backend, test_db};

const BIN: &str = env!("CARGO_BIN_EXE_voxpool-catalog");
const SEED: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../deploy/config/packs.toml"
);

fn run(args: &[&str]) -> Output {
    // Seeded clips go to a scratch blob store, never the user's data directory, and it is
    // removed with the call (nothing reads it afterwards: the database says what exists).
    let blobs = tempfile::tempdir().expect("a scratch blob store");
    Command::new(BIN)
        .args(args)
        .env_remove("VOXPOOL_DATABASE")
        .env_remove("VOXPOOL_ADMIN_TOKEN")
        .env_remove("VOXPOOL_LISTEN")
        .env_remove("VOXPOOL_CONFIG")
        .env_remove("VOXPOOL_POOLS_CONFIG")
        .env(
            "VOXPOOL_BLOB_STORE",
            format!("file://{}", blobs.path().display()),
        )
        .output()
        .expect("run voxpool-catalog")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

async fn seeding_the_shipped_file_twice_creates_each_pack_once(backend: Backend) {
    let db = test_db(backend);
    let first = run(&["seed", SEED, "--database", &db.url]);
    assert!(first.status.success(), "{}", text(&first.stderr));
    let out = text(&first.stdout);
    let created = out.lines().filter(|l| l.starts_with("created vp_")).count();
    assert!(created >= 10, "{out}");
    assert!(
        out.contains(&format!("{created} created, 0 already present")),
        "{out}"
    );

    let second = run(&["seed", SEED, "--database", &db.url]);
    assert!(second.status.success(), "{}", text(&second.stderr));
    let out = text(&second.stdout);
    assert_eq!(
        out.lines().filter(|l| l.starts_with("exists  vp_")).count(),
        created,
        "{out}"
    );
    assert!(
        out.contains(&format!("0 created, {created} already present")),
        "{out}"
    );

    let repo = voxpool_catalog::server::open_repository(&db.url, 1)
        .await
        .expect("open");
    let query = voxpool_catalog::repo::ListQuery {
        limit: 1_000,
        ..Default::default()
    };
    let packs = voxpool_catalog::repo::PackRepository::list(&repo, &query)
        .await
        .expect("list");
    assert_eq!(packs.len(), created);
}
db_test!(seeding_the_shipped_file_twice_creates_each_pack_once);

async fn migrate_subcommand_applies_migrations_and_exits(backend: Backend) {
    let db = test_db(backend);
    let out = run(&["migrate", "--database", &db.url]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("migrations applied"));
    let again = run(&["migrate", "--database", &db.url]);
    assert!(
        again.status.success(),
        "migrate is repeatable: {}",
        text(&again.stderr)
    );
}
db_test!(migrate_subcommand_applies_migrations_and_exits);

#[test]
fn an_unreachable_database_exits_non_zero_with_one_line_and_no_password() {
    let dir = tempfile::tempdir().expect("dir");
    let url = format!(
        "postgres://app:hunter2@localhost/db?host={}&port=5432",
        dir.path().display()
    );
    let out = run(&["migrate", "--database", &url]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.starts_with("voxpool-catalog: cannot open database"),
        "{err}"
    );
    assert!(!err.contains("hunter2"), "{err}");
}

/// `--config` names the pools file, as for the other services; `--pools-config`, its old
/// spelling, still does, with a one-line deprecation warning. A pack no pool serves shows the
/// file was read: refused with either spelling, created with neither.
#[test]
fn both_config_spellings_read_the_pools_file_the_old_one_with_a_warning() {
    const CONFIG: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/config/example.toml"
    );
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("packs.toml");
    std::fs::write(
        &file,
        "[[packs]]\ndisplay_name = \"x\"\nprovider = \"espeak\"\nmodel = \"m\"\nvoice_id = \"v\"\n\
         tts_model_id = \"no-such-pool\"\ntier = \"LITE\"\n",
    )
    .expect("write");
    let file = file.to_str().expect("utf-8 path");
    let seed = |db: &str, flags: &[&str]| {
        let db = format!("sqlite://{}?mode=rwc", dir.path().join(db).display());
        let mut args = vec!["seed", file, "--database", &db];
        args.extend_from_slice(flags);
        run(&args)
    };

    let new = seed("new.db", &["--config", CONFIG]);
    assert!(!new.status.success(), "--config was not read: {new:?}");
    let err = text(&new.stderr);
    assert!(
        err.contains("no configured pool serves tts model id \"no-such-pool\""),
        "{err}"
    );
    assert!(!err.contains("deprecated"), "{err}");

    let old = seed("old.db", &["--pools-config", CONFIG]);
    assert!(
        !old.status.success(),
        "--pools-config was not read: {old:?}"
    );
    let err = text(&old.stderr);
    assert!(
        err.contains("no configured pool serves tts model id \"no-such-pool\""),
        "{err}"
    );
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("deprecated")).collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(warnings[0].contains("use --config"), "{err}");

    let neither = seed("neither.db", &[]);
    assert!(neither.status.success(), "{}", text(&neither.stderr));

    let both = seed("both.db", &["--config", CONFIG, "--pools-config", file]);
    assert!(!both.status.success(), "{both:?}");
    assert!(
        text(&both.stderr).contains("give --config only"),
        "{both:?}"
    );
}

#[test]
fn a_bad_seed_file_exits_non_zero_naming_the_field() {
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("packs.toml");
    std::fs::write(
        &file,
        "[[packs]]\ndisplay_name = \"x\"\nprovider = \"espeak\"\nmodel = \"m\"\nvoice_id = \"v\"\n\
         tts_model_id = \"espeak-local\"\ntier = \"LITE\"\nparams = { pitch_pct = 80 }\n",
    )
    .expect("write");
    let db = format!("sqlite://{}?mode=rwc", dir.path().join("c.db").display());
    let out = run(&[
        "seed",
        file.to_str().expect("utf-8 path"),
        "--database",
        &db,
    ]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("packs[0].params.pitch_pct"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

#[test]
fn a_port_in_use_exits_non_zero_with_the_reason() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let dir = tempfile::tempdir().expect("dir");
    let db = format!("sqlite://{}?mode=rwc", dir.path().join("c.db").display());
    let out = run(&["--listen", &addr, "--database", &db]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains(&format!("cannot listen on {addr}")), "{err}");
}

#[test]
fn an_unsupported_database_scheme_is_refused() {
    let out = run(&["migrate", "--database", "mysql://u:secret@h/d"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("--database must be"), "{err}");
    assert!(!err.contains("secret"), "{err}");
}

/// The server (not `migrate`): a database that cannot be opened yet is waited for, not a
/// reason to exit (a database and the catalog restarting together must not crash-loop). Health
/// is NOT_SERVING and calls are UNAVAILABLE meanwhile, then
/// SERVING, migrated, once the database opens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_not_ready_yet_is_waited_for_not_serving_then_serving() {
    use std::{
        io::{BufRead as _, BufReader},
        process::Stdio,
        time::{Duration, Instant},
    };
    use tonic_health::pb::{
        HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
    };

    let dir = tempfile::tempdir().expect("dir");
    // SQLite creates the file but not its directory: the database opens once it exists.
    let missing = dir.path().join("not-yet");
    let db = format!("sqlite://{}?mode=rwc", missing.join("c.db").display());
    /// Kills the server however the test ends.
    struct Killed(std::process::Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = Command::new(BIN)
        .args(["--listen", "127.0.0.1:0", "--database", &db])
        .env_remove("VOXPOOL_DATABASE")
        .env_remove("VOXPOOL_ADMIN_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map(Killed)
        .expect("spawn voxpool-catalog");
    let mut line = String::new();
    BufReader::new(child.0.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("first line");
    let addr = line
        .trim()
        .strip_prefix("voxpool-catalog listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    let status = async |addr: &str| {
        let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
            .expect("url")
            .connect()
            .await
            .expect("connect");
        let mut h = HealthClient::new(channel);
        let r = h
            .check(HealthCheckRequest {
                service: String::new(),
            })
            .await
            .expect("health answers while the database is down")
            .into_inner();
        ServingStatus::try_from(r.status).expect("status")
    };
    assert_eq!(status(&addr).await, ServingStatus::NotServing);
    assert!(
        child.0.try_wait().expect("wait").is_none(),
        "the catalog exited instead of waiting for its database"
    );
    std::fs::create_dir(&missing).expect("create the database directory");
    let deadline = Instant::now() + Duration::from_secs(20);
    while status(&addr).await != ServingStatus::Serving {
        assert!(
            Instant::now() < deadline,
            "never SERVING once the database opened"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(missing.join("c.db").exists());
}
