use clap::CommandFactory as _;

use super::*;

#[test]
fn the_command_line_definition_is_consistent() {
    Cli::command().debug_assert();
}

#[test]
fn batch_defaults_match_the_documented_ones() {
    let cli = Cli::try_parse_from(["voxctl", "batch", "m.jsonl", "--out", "d"]).expect("parse");
    let Command::Batch(b) = cli.command else {
        panic!("not batch");
    };
    assert_eq!(
        (b.concurrency, b.max_attempts, b.max_chars),
        (16, 5, 20_000)
    );
    assert_eq!(b.deadline, Duration::from_secs(60));
    assert_eq!(b.format, Format::Wav);
    assert_eq!(
        b.priority,
        PriorityArg::Batch,
        "bulk work is BATCH unless told"
    );
}

#[test]
fn zero_periods_and_out_of_range_shares_are_usage_errors() {
    let batch = |extra: &[&str]| {
        let mut args = vec!["voxctl", "batch", "m.jsonl", "--out", "d"];
        args.extend_from_slice(extra);
        Cli::try_parse_from(args)
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    for bad in [
        &["--progress-interval", "0s"][..],
        &["--deadline", "0s"],
        &["--breaker-ratio", "2"],
        &["--breaker-ratio", "0"],
        &["--breaker-ratio", "-0.1"],
        &["--breaker-window", "0"],
        &["--priority", "urgent"],
        &["--tenant", &"t".repeat(65)],
    ] {
        let err = batch(bad).expect_err("refused");
        assert!(err.contains(bad[0]), "{bad:?}: {err}");
    }
    assert!(batch(&["--breaker-ratio", "1", "--deadline", "1ms"]).is_ok());
    let watch = Cli::try_parse_from(["voxctl", "pool", "status", "--watch", "--interval", "0s"]);
    assert!(watch.is_err(), "a zero redraw period would spin");
    let without_watch = Cli::try_parse_from(["voxctl", "pool", "status", "--interval", "2s"]);
    assert!(
        without_watch.is_err(),
        "--interval means nothing without --watch"
    );
}

#[test]
fn synth_needs_exactly_one_voice() {
    assert!(Cli::try_parse_from(["voxctl", "synth", "hi", "-o", "x.wav"]).is_err());
    assert!(
        Cli::try_parse_from([
            "voxctl", "synth", "hi", "-o", "x.wav", "--pack", "a", "--card", "c"
        ])
        .is_err()
    );
    assert!(Cli::try_parse_from(["voxctl", "synth", "hi", "-o", "x.wav", "--pack", "a"]).is_ok());
}

#[test]
fn the_client_token_is_taken_after_any_subcommand() {
    for args in [
        &["voxctl", "--token", "t-0123456789abcdef", "pool", "status"][..],
        &["voxctl", "pool", "status", "--token", "t-0123456789abcdef"],
        &[
            "voxctl",
            "synth",
            "hi",
            "-o",
            "x.wav",
            "--pack",
            "a",
            "--token",
            "t-0123456789abcdef",
        ],
    ] {
        let cli = Cli::try_parse_from(args).expect("parses");
        assert_eq!(cli.token.as_deref(), Some("t-0123456789abcdef"), "{args:?}");
    }
}

#[test]
fn the_cache_policy_defaults_to_use_and_takes_the_three_policies() {
    let batch = |extra: &[&str]| {
        let mut args = vec!["voxctl", "batch", "m.jsonl", "--out", "d"];
        args.extend_from_slice(extra);
        match Cli::try_parse_from(args).map(|c| c.command) {
            Ok(Command::Batch(b)) => Ok(b.cache_policy),
            Ok(_) => panic!("not batch"),
            Err(e) => Err(e.to_string()),
        }
    };
    // Unset in the test environment: what a run without the flag sends.
    if std::env::var_os("VOXPOOL_CACHE_POLICY").is_none() {
        assert_eq!(batch(&[]), Ok(CachePolicyArg::Use));
    }
    for (raw, policy) in [
        ("use", CachePolicyArg::Use),
        ("refresh", CachePolicyArg::Refresh),
        ("bypass", CachePolicyArg::Bypass),
    ] {
        assert_eq!(batch(&["--cache-policy", raw]), Ok(policy));
    }
    let err = batch(&["--cache-policy", "sometimes"]).expect_err("refused");
    assert!(err.contains("--cache-policy"), "{err}");
    use voxpool_proto::synthesis::v1::CachePolicy;
    assert_eq!(CachePolicyArg::Refresh.to_pb(), CachePolicy::Refresh);
    let synth = Cli::try_parse_from([
        "voxctl",
        "synth",
        "hi",
        "-o",
        "x.wav",
        "--pack",
        "a",
        "--cache-policy",
        "bypass",
    ])
    .expect("parse");
    let Command::Synth(s) = synth.command else {
        panic!("not synth");
    };
    assert_eq!(s.cache_policy.to_pb(), CachePolicy::Bypass);
}

#[test]
fn cache_purge_needs_a_pack_or_a_well_formed_snapshot_digest() {
    let purge = |extra: &[&str]| {
        let mut args = vec!["voxctl", "cache", "purge"];
        args.extend_from_slice(extra);
        match Cli::try_parse_from(args).map(|c| c.command) {
            Ok(Command::Cache(CacheArgs {
                command:
                    CacheCommand::Purge {
                        pack,
                        snapshot_digest,
                    },
                ..
            })) => Ok((pack, snapshot_digest)),
            Ok(_) => panic!("not cache purge"),
            Err(e) => Err((e.exit_code(), e.to_string())),
        }
    };
    let (code, err) = purge(&[]).expect_err("neither flag");
    assert_eq!(code, 2);
    assert!(
        err.contains("--pack") && err.contains("--snapshot-digest"),
        "{err}"
    );
    let hex = "AB".repeat(32);
    assert_eq!(
        purge(&[
            "--pack",
            "vp_1",
            "--snapshot-digest",
            &format!("sha256:{hex}")
        ]),
        Ok((
            Some("vp_1".to_owned()),
            Some(format!("sha256:{}", "ab".repeat(32)))
        ))
    );
    for bad in [
        &["--snapshot-digest", "sha256:abc"][..],
        &["--snapshot-digest", &"a".repeat(64)],
        &["--pack", " "],
    ] {
        let (code, err) = purge(bad).expect_err("refused");
        assert_eq!(code, 2, "{bad:?}");
        assert!(err.contains(bad[0]), "{bad:?}: {err}");
    }
    let stats = Cli::try_parse_from([
        "voxctl",
        "cache",
        "stats",
        "--synthesis",
        "http://h:1",
        "--admin-token",
        "t",
    ])
    .expect("parse");
    let Command::Cache(c) = stats.command else {
        panic!("not cache");
    };
    assert_eq!(
        (c.synthesis.as_str(), c.admin.admin_token.as_deref()),
        ("http://h:1", Some("t"))
    );
}

fn job(args: &[&str]) -> Result<JobArgs, (i32, String)> {
    let mut all = vec!["voxctl", "job"];
    all.extend_from_slice(args);
    match Cli::try_parse_from(all).map(|c| c.command) {
        Ok(Command::Job(j)) => Ok(j),
        Ok(_) => panic!("not job"),
        Err(e) => Err((e.exit_code(), e.to_string())),
    }
}

#[test]
fn job_subcommands_parse_with_the_documented_names_and_defaults() {
    let submit = job(&["submit", "book.jsonl"]).expect("submit");
    if std::env::var_os("VOXPOOL_JOBS").is_none() {
        assert_eq!(submit.jobs, DEFAULT_JOBS);
    }
    assert_eq!(DEFAULT_JOBS, "http://127.0.0.1:50054");
    let JobCommand::Submit(s) = submit.command else {
        panic!("not submit");
    };
    assert_eq!(s.manifest, PathBuf::from("book.jsonl"));
    assert_eq!((s.format, s.sample_rate), (Format::Wav, 0));
    assert_eq!(
        s.priority,
        JobPriorityArg::Batch,
        "a job is bulk work unless told"
    );
    assert_eq!(
        (s.tenant.as_str(), s.webhook_url.as_str(), s.request_id),
        ("", "", None)
    );
    assert_eq!(
        s.timeout,
        Duration::from_secs(30),
        "transient failures are retried for 30 s"
    );
    let wait = job(&["wait", "abc", "--jobs", "http://h:1"]).expect("wait");
    assert_eq!(wait.jobs, "http://h:1");
    let JobCommand::Wait {
        job: name,
        interval,
        timeout,
        progress,
        ..
    } = wait.command
    else {
        panic!("not wait");
    };
    assert_eq!(name, "jobs/abc", "a bare id is normalised");
    assert_eq!(
        (interval, timeout, progress),
        (Duration::from_secs(1), None, ProgressArg::Auto)
    );
    let items = job(&["items", "jobs/abc", "--state", "failed"]).expect("items");
    let JobCommand::Items { job: name, state } = items.command else {
        panic!("not items");
    };
    assert_eq!(
        (name.as_str(), state),
        ("jobs/abc", Some(ItemStateArg::Failed))
    );
    let upper = job(&["items", "abc", "--state", "SUCCEEDED"]).expect("items, as printed");
    assert!(
        matches!(
            upper.command,
            JobCommand::Items {
                state: Some(ItemStateArg::Succeeded),
                ..
            }
        ),
        "the state as voxctl prints it is accepted"
    );
    assert_eq!(
        ItemStateArg::Cancelled.to_pb().as_str_name(),
        "CANCELLED",
        "the filter names the wire state"
    );
    let download = job(&["download", "abc", "out"]).expect("download");
    let JobCommand::Download {
        dir,
        report,
        concurrency,
        ..
    } = download.command
    else {
        panic!("not download");
    };
    assert_eq!((dir, report, concurrency), (PathBuf::from("out"), None, 8));
    for ok in [&["status", "abc", "--json"][..], &["cancel", "abc"]] {
        assert!(job(ok).is_ok(), "{ok:?}");
    }
    let list = job(&["list"]).expect("list");
    assert!(
        matches!(&list.command, JobCommand::List { tenant } if tenant.is_empty()),
        "the shared tenant unless told"
    );
    let list = job(&["list", "--tenant", "team-a"]).expect("list --tenant");
    assert!(matches!(&list.command, JobCommand::List { tenant } if tenant == "team-a"));
    let delete = job(&["delete", "abc"]).expect("delete");
    assert!(matches!(&delete.command, JobCommand::Delete { job } if job == "jobs/abc"));
    let cli = Cli::try_parse_from([
        "voxctl",
        "job",
        "status",
        "abc",
        "--token",
        "t-0123456789abcdef",
    ])
    .expect("token after the job subcommand");
    assert_eq!(cli.token.as_deref(), Some("t-0123456789abcdef"));
}

#[test]
fn bad_job_arguments_are_usage_errors_naming_the_argument() {
    for (args, names) in [
        (
            &["submit", "m.jsonl", "--priority", "interactive"][..],
            "--priority",
        ),
        (
            &["submit", "m.jsonl", "--webhook-url", "ftp://x"],
            "--webhook-url",
        ),
        (
            &["submit", "m.jsonl", "--webhook-url", "https://"],
            "--webhook-url",
        ),
        (
            &["submit", "m.jsonl", "--request-id", &"r".repeat(129)],
            "--request-id",
        ),
        (
            &["submit", "m.jsonl", "--tenant", &"t".repeat(65)],
            "--tenant",
        ),
        (&["submit", "m.jsonl", "--sample-rate=-1"], "--sample-rate"),
        (&["wait", "abc", "--interval", "0s"], "--interval"),
        (&["wait", "abc", "--timeout", "soon"], "--timeout"),
        (&["items", "abc", "--state", "done"], "--state"),
        (&["status", "jobs/a/items/b"], "<JOB>"),
        (&["delete", "jobs/a/items/b"], "<JOB>"),
        (&["list", "--tenant", &"t".repeat(65)], "--tenant"),
        (&["submit", "m.jsonl", "--timeout", "0s"], "--timeout"),
        (&["cancel", ""], "<JOB>"),
        (&["download", "abc"], "<DIR>"),
        (
            &["download", "abc", "d", "--concurrency", "0"],
            "--concurrency",
        ),
    ] {
        let (code, err) = job(args).expect_err("refused");
        assert_eq!(code, 2, "{args:?}");
        assert!(err.contains(names), "{args:?}: {err}");
    }
    let ok = job(&[
        "submit",
        "m.jsonl",
        "--webhook-url",
        "https://hooks.example.com/v?t=1",
        "--priority",
        "standard",
    ])
    .expect("ok");
    let JobCommand::Submit(s) = ok.command else {
        panic!("not submit");
    };
    assert_eq!(
        s.priority.to_pb(),
        voxpool_proto::scheduler::v1::Priority::Standard
    );
}

#[test]
fn pools_without_a_subcommand_is_pool_status() {
    for args in [
        &["voxctl", "pools"][..],
        &["voxctl", "pool", "espeak-local"][..],
        &["voxctl", "pool", "status", "espeak-local"][..],
    ] {
        let cli = Cli::try_parse_from(args).expect("parse");
        let super::Command::Pool { command, status } = cli.command else {
            panic!("{args:?} is not the pool command");
        };
        let pool = match command {
            Some(super::PoolCommand::Status(s)) => s.pool,
            None => status.pool,
        };
        assert_eq!(pool.is_some(), args.len() > 2, "{args:?}");
    }
}

#[test]
fn clone_commands_parse_their_scopes_and_refuse_what_the_catalog_would() {
    let parse = |args: &[&str]| {
        let mut all = vec!["voxctl", "pack"];
        all.extend_from_slice(args);
        Cli::try_parse_from(all).map_err(|e| e.to_string())
    };
    let Ok(Cli {
        command:
            Command::Packs(PacksArgs {
                command: PacksCommand::CloneVoice(c),
                ..
            }),
        ..
    }) = parse(&[
        "clone",
        "vp_1",
        "--scope",
        "a",
        "--scope",
        "b/k1",
        "--max-scopes",
        "2",
    ])
    else {
        panic!("pack clone parses");
    };
    assert_eq!(
        (c.pack.as_str(), c.scopes, c.max_scopes, c.json),
        (
            "vp_1",
            vec!["a".to_owned(), "b/k1".to_owned()],
            Some(2),
            false
        )
    );
    let Ok(Cli {
        command:
            Command::Packs(PacksArgs {
                command: PacksCommand::Clones(c),
                ..
            }),
        ..
    }) = parse(&["clones", "vp_1", "--delete", "a", "--json"])
    else {
        panic!("pack clones parses");
    };
    assert_eq!((c.delete.as_deref(), c.json), (Some("a"), true));
    for bad in [
        &["clone", "vp_1", "--max-scopes", "0"][..],
        &["clone", "vp_1", "--max-scopes", "65"],
        &["clone", "vp_1", "--scope", " "],
        &["clones", "vp_1", "--delete"],
        &["import"],
        &["import", "--pool", ""],
    ] {
        assert!(parse(bad).is_err(), "{bad:?} is refused");
    }
    assert!(parse(&["import", "--pool", "eleven", "--scope", "team-a", "--json"]).is_ok());
}
