//! Connecting to the catalog database and migrating it.
//!
//! `--database` is `sqlite:PATH?mode=rwc` / `sqlite://PATH?mode=rwc` / `sqlite::memory:` or
//! `postgres://user:password@host:port/db` (also `?host=/unix/socket/dir`). SQLite files run
//! in WAL mode with `synchronous=NORMAL` and a 5 s busy timeout so readers never block the
//! writer; an in-memory SQLite database is one connection (each connection would otherwise
//! be a separate empty database). Errors are one-line reasons with any password redacted.

use std::time::Duration;

use sea_orm::{
    ConnectOptions, Database, DatabaseConnection,
    sqlx::sqlite::{SqliteJournalMode, SqliteSynchronous},
};
use voxpool_migrations::{Migrator, MigratorTrait};

/// How long to wait for the database when connecting or taking a pooled connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Checks `--database` names a supported database, without connecting: the error no retry
/// can fix (one line, redacted).
pub fn check_url(url: &str) -> Result<(), String> {
    if !url.starts_with("sqlite:")
        && !url.starts_with("postgres://")
        && !url.starts_with("postgresql://")
    {
        return Err(format!(
            "--database must be sqlite://PATH?mode=rwc or postgres://…, got {:?}",
            redact(url)
        ));
    }
    Ok(())
}

/// Opens a connection pool of at most `pool_size` connections.
///
/// Errors: an unsupported scheme, or the database cannot be reached (one line, redacted).
pub async fn connect(url: &str, pool_size: u32) -> Result<DatabaseConnection, String> {
    check_url(url)?;
    let sqlite = url.starts_with("sqlite:");
    let in_memory = url.contains(":memory:") || url.contains("mode=memory");
    let mut options = ConnectOptions::new(url.to_owned());
    options
        .max_connections(if in_memory { 1 } else { pool_size.max(1) })
        .min_connections(if in_memory { 1 } else { 0 })
        .connect_timeout(CONNECT_TIMEOUT)
        .acquire_timeout(CONNECT_TIMEOUT)
        .sqlx_logging(false);
    if sqlite && !in_memory {
        options.map_sqlx_sqlite_opts(|o| {
            o.journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Normal)
                .busy_timeout(CONNECT_TIMEOUT)
        });
    }
    Database::connect(options).await.map_err(|e| {
        let e = e.to_string();
        scrub(
            &format!(
                "cannot open database {}: {e}{}",
                redact(url),
                open_hint(url, &e)
            ),
            url,
        )
    })
}

/// What to do about a database that would not open, when the cause is a common one.
fn open_hint(url: &str, error: &str) -> &'static str {
    if url.starts_with("sqlite:") && error.contains("code: 14") && !url.contains("mode=rwc") {
        " (the file does not exist or its directory is not writable: add ?mode=rwc to create it, e.g. sqlite://voxpool.db?mode=rwc)"
    } else if url.starts_with("sqlite:") && error.contains("code: 14") {
        " (SQLite creates the file but not its directory: create the directory, or check that it is writable)"
    } else if !url.starts_with("sqlite:") && error.contains("timed out") {
        " (no PostgreSQL answered: is it running, and are the host, port and credentials in --database right?)"
    } else {
        ""
    }
}

/// Runs every pending migration. Errors are one line, redacted.
pub async fn migrate(db: &DatabaseConnection, url: &str) -> Result<(), String> {
    Migrator::up(db, None)
        .await
        .map_err(|e| scrub(&format!("migrating database {}: {e}", redact(url)), url))
}

/// `url` with the password (userinfo or `password=` parameter) replaced by `***`.
pub fn redact(url: &str) -> String {
    let mut out = url.to_owned();
    if let Some(password) = password_of(url) {
        out = out.replace(&format!(":{password}@"), ":***@");
        out = out.replace(&format!("password={password}"), "password=***");
    }
    out
}

/// Removes the password of `url` from any text (driver errors may quote the DSN).
fn scrub(text: &str, url: &str) -> String {
    match password_of(url) {
        Some(p) if !p.is_empty() => text.replace(&p, "***"),
        _ => text.to_owned(),
    }
}

fn password_of(url: &str) -> Option<String> {
    let rest = &url[url.find("://")? + 3..];
    let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
    let from_userinfo = authority
        .rfind('@')
        .and_then(|at| authority[..at].split_once(':'))
        .map(|(_, p)| p.to_owned());
    from_userinfo.or_else(|| {
        let query = &url[url.find('?')? + 1..];
        query
            .split('&')
            .find_map(|kv| kv.strip_prefix("password="))
            .map(str::to_owned)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_open_failures_say_what_to_do() {
        assert!(
            open_hint("sqlite:///x.db", "(code: 14) unable to open database file")
                .contains("?mode=rwc")
        );
        assert!(
            open_hint("sqlite:///no/such/dir/x.db?mode=rwc", "(code: 14) unable")
                .contains("create the directory")
        );
        assert!(
            open_hint(
                "postgres://db/v",
                "pool timed out while waiting for an open connection"
            )
            .contains("PostgreSQL")
        );
    }

    #[test]
    fn passwords_never_survive_redaction() {
        assert_eq!(
            redact("postgres://app:hunter2@db:5432/vox"),
            "postgres://app:***@db:5432/vox"
        );
        assert_eq!(
            redact("postgres://app@db/vox?password=hunter2&sslmode=require"),
            "postgres://app@db/vox?password=***&sslmode=require"
        );
        assert_eq!(
            redact("sqlite://voxpool.db?mode=rwc"),
            "sqlite://voxpool.db?mode=rwc"
        );
        assert_eq!(
            scrub("failed for hunter2", "postgres://a:hunter2@h/d"),
            "failed for ***"
        );
    }

    #[tokio::test]
    async fn an_unknown_scheme_is_a_one_line_reason() {
        let e = connect("mysql://u:pw@h/d", 1).await.unwrap_err();
        assert!(e.contains("--database must be"), "{e}");
        assert!(!e.contains("pw@"), "{e}");
        assert!(!e.contains('\n'));
    }
}
