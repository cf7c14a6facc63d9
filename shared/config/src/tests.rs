//! Tests of the config shape: parsing, defaults, validation paths.

use super::*;

const GOOD: &str = r#"
[[pools]]
id = "volc-standard"
provider = "volcengine"
model = "seed-tts-1.0"

[[pools.upstreams]]
id = "acct-a"
base_url = "https://openspeech.bytedance.com"
params = { cluster = "volcano_tts" }

[[pools.upstreams.keys]]
id = "app-1"
capacity = 10
credential = { env = "VOXPOOL_TEST_NEVER_SET_1" }
"#;

#[test]
fn quota_windows_are_utc_calendar_days_and_months() {
    // 2026-12-31T23:59:59.999Z and the instant after.
    let last_ms_of_2026 = 1_798_761_599_999;
    let (start, end) = QuotaPeriod::Day.window(last_ms_of_2026);
    assert_eq!((start, end), (1_798_675_200_000, 1_798_761_600_000));
    let (start, end) = QuotaPeriod::Month.window(last_ms_of_2026);
    assert_eq!(start, 1_796_083_200_000, "2026-12-01T00:00Z");
    assert_eq!(end, 1_798_761_600_000, "2027-01-01T00:00Z");
    assert_eq!(
        QuotaPeriod::Month.window(end).0,
        end,
        "the next period starts at the end"
    );
    // February of a leap year.
    let feb_2028 = 1_834_617_600_000; // 2028-02-20T00:00Z
    let (start, end) = QuotaPeriod::Month.window(feb_2028);
    assert_eq!((end - start) / 86_400_000, 29);
}

#[test]
fn api_md_example_parses_and_validates_without_credentials() {
    let c = Config::from_toml_str(GOOD).unwrap();
    c.validate(Credentials::Ignore).unwrap();
    assert_eq!(c.pools[0].upstreams[0].keys[0].capacity, 10);
    assert_eq!(
        c.pools[0].upstreams[0].keys[0].credential,
        Some(CredentialRef::Env("VOXPOOL_TEST_NEVER_SET_1".into()))
    );
}

#[test]
fn missing_credential_variable_is_named_not_printed() {
    let c = Config::from_toml_str(GOOD).unwrap();
    let err = c.validate(Credentials::Require).unwrap_err().to_string();
    assert!(
        err.contains("pools[0].upstreams[0].keys[0].credential"),
        "{err}"
    );
    assert!(err.contains("VOXPOOL_TEST_NEVER_SET_1 is not set"), "{err}");
}

#[test]
fn credentials_are_references_with_exactly_one_known_field() {
    for (bad, want) in [
        (
            r#"credential = "sk-inline-secret-123456""#,
            "never the secret itself",
        ),
        (
            r#"credential = { env = "A", foo = 1 }"#,
            "unknown credential field \"foo\"",
        ),
        (
            r#"credential = { env = "A", file = "/x" }"#,
            "both env and file",
        ),
        (r#"credential = {}"#, "empty credential"),
    ] {
        let text = GOOD.replace(r#"credential = { env = "VOXPOOL_TEST_NEVER_SET_1" }"#, bad);
        let err = Config::from_toml_str(&text).unwrap_err().to_string();
        assert!(err.contains(want), "{bad}: {err}");
        assert!(
            !err.contains("sk-inline-secret"),
            "the inline secret was echoed: {err}"
        );
    }
    let text = GOOD.replace(
        r#"{ env = "VOXPOOL_TEST_NEVER_SET_1" }"#,
        r#"{ file = "/run/secrets/x" }"#,
    );
    let c = Config::from_toml_str(&text).unwrap();
    assert_eq!(
        c.pools[0].upstreams[0].keys[0].credential,
        Some(CredentialRef::File("/run/secrets/x".into()))
    );
}

#[test]
fn store_settings_out_of_range_are_named_with_what_is_accepted() {
    for (lines, path, want) in [
        (
            "store_replica_ack_timeout_ms = 501\n",
            "scheduler.store_replica_ack_timeout_ms",
            "half of store_timeout_ms 1000",
        ),
        (
            "store_replica_ack_timeout_ms = 0\n",
            "scheduler.store_replica_ack_timeout_ms",
            "must be 1..=500",
        ),
        (
            "recovery_window_ms = 700000\n",
            "scheduler.recovery_window_ms",
            "max_lease_ttl_ms (600000)",
        ),
        (
            "store_key_prefix = \"a{b}\"\n",
            "scheduler.store_key_prefix",
            "got \"a{b}\"",
        ),
    ] {
        let c = Config::from_toml_str(&format!("{GOOD}\n[scheduler]\n{lines}")).unwrap();
        let err = c.validate(Credentials::Ignore).unwrap_err().to_string();
        assert!(err.contains(path) && err.contains(want), "{lines}: {err}");
    }
}

#[test]
fn unknown_fields_fail_loudly() {
    let text = GOOD.replace("capacity = 10", "capacty = 10");
    let err = Config::from_toml_str(&text).unwrap_err().to_string();
    assert!(err.contains("capacty"), "{err}");
}

#[test]
fn problems_name_their_paths() {
    let text = format!(
        "{GOOD}\n[[pools.upstreams.keys]]\nid = \"app-1\"\ncapacity = 0\n\n[[pools]]\nid = \"volc-standard\"\nprovider = \"nope\"\n"
    );
    let err = Config::from_toml_str(&text)
        .unwrap()
        .validate(Credentials::Ignore)
        .unwrap_err();
    let ConfigError::Invalid(problems) = err else {
        panic!("expected Invalid")
    };
    let paths: Vec<_> = problems.iter().map(|p| p.path.as_str()).collect();
    assert!(
        paths.contains(&"pools[0].upstreams[0].keys[1].id"),
        "{paths:?}"
    );
    assert!(
        paths.contains(&"pools[0].upstreams[0].keys[1].capacity"),
        "{paths:?}"
    );
    assert!(paths.contains(&"pools[1].id"), "{paths:?}");
    assert!(paths.contains(&"pools[1].provider"), "{paths:?}");
    assert!(paths.contains(&"pools[1].upstreams"), "{paths:?}");
}

#[test]
fn batch_max_share_defaults_to_one_and_must_be_a_share() {
    let c = Config::from_toml_str(GOOD).unwrap();
    assert_eq!(c.pools[0].batch_max_share, 1.0);
    for bad in ["0", "1.5", "-0.2", "nan"] {
        let text = GOOD.replacen(
            "model = \"seed-tts-1.0\"",
            &format!("model = \"seed-tts-1.0\"\nbatch_max_share = {bad}"),
            1,
        );
        let err = Config::from_toml_str(&text)
            .unwrap()
            .validate(Credentials::Ignore)
            .unwrap_err();
        assert!(
            err.to_string().contains("pools[0].batch_max_share"),
            "{bad}: {err}"
        );
    }
    let ok = GOOD.replacen(
        "model = \"seed-tts-1.0\"",
        "model = \"seed-tts-1.0\"\nbatch_max_share = 0.6",
        1,
    );
    let c = Config::from_toml_str(&ok).unwrap();
    c.validate(Credentials::Ignore).unwrap();
    assert_eq!(c.pools[0].batch_max_share, 0.6);
}

#[test]
fn ids_follow_the_documented_charset() {
    assert!(is_valid_id("volc-standard"));
    assert!(is_valid_id("a.b_c-1"));
    assert!(!is_valid_id(""));
    assert!(!is_valid_id("-x"));
    assert!(!is_valid_id("Upper"));
    assert!(!is_valid_id("a/b"));
    assert!(!is_valid_id(&"x".repeat(65)));
}
