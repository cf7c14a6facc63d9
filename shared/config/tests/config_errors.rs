//! Config load errors in the words of the layer that caused them (`config::load_error`), through
//! the real figment providers. These tests set `VOXPOOL_*` environment variables (figment's
//! `Jail` sets and restores them, one test at a time), so they live in this test binary of
//! their own: in the library's unit-test process they would race the tests that load
//! configs.

use voxpool_config::Config;

/// Loads `toml` through [`Config::from_toml_str`] with `env` set (figment's `Jail`
/// serializes the tests that touch the environment and restores it after).
#[allow(
    clippy::result_large_err,
    reason = "Jail's closure returns figment's own error type"
)]
fn load(toml: &str, env: &[(&str, &str)]) -> String {
    let mut text = String::new();
    figment::Jail::expect_with(|jail| {
        for (k, v) in env {
            jail.set_env(k, v);
        }
        if let Err(e) = Config::from_toml_str(toml) {
            text = e.to_string();
        }
        Ok(())
    });
    text
}

const KEY_TYPO: &str = "[[pools]]\nid = 'a'\nprovider = 'espeak'\n[[pools.upstreams]]\nid = 'u'\n[[pools.upstreams.keys]]\nid = 'k'\ncapcity = 3\n";

#[test]
fn a_file_typo_names_the_file_the_indexed_path_and_the_intended_field() {
    let text = load(KEY_TYPO, &[]);
    assert_eq!(
        text,
        "config text: pools[0].upstreams[0].keys[0].capcity: unknown field `capcity`; \
         known fields: `id`, `capacity`, `credential`, `quota` (did you mean `capacity`?)"
    );
}

#[test]
fn an_environment_typo_names_the_variable_not_the_file() {
    let text = load("", &[("VOXPOOL_SCHEDULER__WAIT_POL_MS", "3")]);
    assert!(
        text.starts_with(
            "environment variable VOXPOOL_SCHEDULER__WAIT_POL_MS: unknown field `wait_pol_ms`"
        ),
        "{text}"
    );
    assert!(
        text.ends_with("(did you mean VOXPOOL_SCHEDULER__WAIT_POLL_MS?)"),
        "{text}"
    );
    assert!(!text.contains("config text"), "{text}");
}

#[test]
fn a_wrong_type_says_what_was_expected_and_found() {
    let text = load("[scheduler]\nwait_poll_ms = 'soon'\n", &[]);
    assert!(
        text.starts_with("config text: scheduler.wait_poll_ms: expected u64, found string"),
        "{text}"
    );
    let env = load("", &[("VOXPOOL_SYNTHESIS__MAX_ATTEMPTS", "many")]);
    assert!(
        env.starts_with("environment variable VOXPOOL_SYNTHESIS__MAX_ATTEMPTS: expected u32"),
        "{env}"
    );
}

#[test]
fn a_name_far_from_every_field_gets_no_guess() {
    let text = load("[scheduler]\nzebra = 1\n", &[]);
    assert!(
        text.contains("unknown field `zebra`") && !text.contains("did you mean"),
        "{text}"
    );
}

/// The validation problems of `toml` (loaded inside figment's `Jail`, as [`load`] does).
#[allow(
    clippy::result_large_err,
    reason = "Jail's closure returns figment's own error type"
)]
fn problems(toml: &str) -> String {
    let mut text = String::new();
    figment::Jail::expect_with(|_| {
        match Config::from_toml_str(toml) {
            Ok(c) => {
                if let Err(e) = c.validate(voxpool_config::Credentials::Ignore) {
                    text = e.to_string();
                }
            }
            Err(e) => text = format!("load failed: {e}"),
        }
        Ok(())
    });
    text
}

const ONE_POOL: &str = "[[pools]]\nid = 'a'\nprovider = 'espeak'\n[[pools.upstreams]]\nid = 'u'\n[[pools.upstreams.keys]]\nid = 'k'\ncapacity = 3\n";

#[test]
fn zero_text_limit_and_zero_attempt_timeout_are_refused_naming_their_paths() {
    for (field, want) in [
        (
            "max_text_chars",
            "synthesis.max_text_chars: must be at least 1, got 0",
        ),
        (
            "attempt_timeout_ms",
            "synthesis.attempt_timeout_ms: must be at least 1, got 0",
        ),
    ] {
        let text = problems(&format!("{ONE_POOL}[synthesis]\n{field} = 0\n"));
        assert!(text.contains(want), "{field}: {text}");
    }
    assert_eq!(
        problems(&format!(
            "{ONE_POOL}[synthesis]\nmax_text_chars = 1\nattempt_timeout_ms = 1\n"
        )),
        "",
        "1 is a (tiny) limit"
    );
}

#[test]
fn the_scheduler_probe_interval_must_sit_below_the_unavailable_grace() {
    for (lines, got) in [
        ("scheduler_probe_interval_ms = 10\n", "got 10"),
        ("scheduler_probe_interval_ms = 5000\n", "got 5000"),
        (
            "scheduler_unavailable_grace_ms = 400\nscheduler_probe_interval_ms = 500\n",
            "got 500",
        ),
    ] {
        let text = problems(&format!("{ONE_POOL}[synthesis]\n{lines}"));
        assert!(
            text.contains("synthesis.scheduler_probe_interval_ms: must be at least 50 and below")
                && text.contains(got),
            "{lines}: {text}"
        );
    }
    assert_eq!(
        problems(&format!(
            "{ONE_POOL}[synthesis]\nscheduler_probe_interval_ms = 4999\n"
        )),
        "",
        "just below the default grace (5000)"
    );
    assert_eq!(problems(ONE_POOL), "", "the defaults (500 below 5000)");
}

#[test]
fn an_absurd_max_waiters_is_refused_with_the_accepted_range() {
    let text = problems(&format!("{ONE_POOL}[scheduler]\nmax_waiters = 100000000\n"));
    assert!(
        text.contains("scheduler.max_waiters: must be 1..=100000")
            && text.contains("got 100000000"),
        "{text}"
    );
    assert_eq!(
        problems(&format!(
            "{ONE_POOL}[scheduler]\nmax_waiters = {}\n",
            voxpool_config::MAX_WAITERS
        )),
        "",
        "the bound itself is accepted"
    );
}

#[test]
#[allow(
    clippy::result_large_err,
    reason = "Jail's closure returns figment's own error type"
)]
fn cancel_grace_defaults_and_is_bounded_naming_the_pool() {
    figment::Jail::expect_with(|_| {
        let parsed = Config::from_toml_str(ONE_POOL).expect("parses");
        assert_eq!(
            parsed.pools[0].cancel_grace_ms,
            voxpool_config::DEFAULT_CANCEL_GRACE_MS
        );
        Ok(())
    });
    let with = |ms: u64| {
        ONE_POOL.replacen(
            "provider = 'espeak'\n",
            &format!("provider = 'espeak'\ncancel_grace_ms = {ms}\n"),
            1,
        )
    };
    assert_eq!(
        problems(&with(0)),
        "",
        "0: released once the connection is closed"
    );
    let text = problems(&with(60_000));
    assert!(
        text.contains("pools[0].cancel_grace_ms: must be 0..=10000 ms")
            && text.contains("got 60000"),
        "{text}"
    );
}
