//! Logging setup shared by every binary: `tracing` with an `EnvFilter` (`RUST_LOG`, default
//! `info`) and pretty or JSON output chosen by `VOXPOOL_LOG_FORMAT` (`pretty` | `json`).
//! Logs go to stderr so stdout stays free for command output (`--check-config`).

use tracing_subscriber::{EnvFilter, fmt, prelude::*};

/// Installs the global subscriber. Safe to call more than once (later calls do nothing).
pub fn init_logging() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let json = std::env::var("VOXPOOL_LOG_FORMAT").is_ok_and(|v| v.eq_ignore_ascii_case("json"));
    let registry = tracing_subscriber::registry().with(filter);
    let result = if json {
        registry
            .with(fmt::layer().json().with_writer(std::io::stderr))
            .try_init()
    } else {
        registry
            .with(fmt::layer().with_writer(std::io::stderr))
            .try_init()
    };
    // An already-installed subscriber (tests, repeated init) is fine.
    let _ = result;
}
