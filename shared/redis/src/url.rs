//! Redis URLs of every topology: splitting the multi-host forms (`redis-sentinel://`,
//! `redis-cluster://`) into per-node connection infos, and [`redact`], the only form of a URL
//! that messages and logs show.

use redis::IntoConnectionInfo;

/// `url` with any credentials replaced by `***`, safe to print: the user info before the
/// hosts, and everything from the first `?` on (`unix:///r.sock?pass=…` carries a password
/// there, which may itself hold a `#`).
pub fn redact(url: &str) -> String {
    let (url, fragment) = match url.split_once('?') {
        Some((before, _)) => (before, Some("?***")),
        None => (url, None),
    };
    let (url, fragment) = match (fragment, url.rsplit_once('#')) {
        (None, Some((u, f))) if !f.contains('@') => (u, format!("#{f}")),
        (f, _) => (url, f.unwrap_or_default().to_owned()),
    };
    let masked = match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_owned(),
    };
    format!("{masked}{fragment}")
}

/// A multi-host URL split into its parts: `scheme://[userinfo@]h:p,h:p[/db][#name]`.
pub(super) struct MultiHost<'a> {
    pub(super) tls: bool,
    userinfo: Option<&'a str>,
    hosts: Vec<&'a str>,
    pub(super) db: Option<&'a str>,
    pub(super) name: Option<&'a str>,
}

/// Splits a multi-host URL. The user info ends at the *last* `@`, so a password holding `#`,
/// `/` or `?` never leaks into a host, database or name (and so into an error message).
pub(super) fn split_multi_host(url: &str) -> Result<MultiHost<'_>, String> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| "missing \"://\"".to_owned())?;
    let (userinfo, rest) = match rest.rsplit_once('@') {
        Some((u, r)) => (Some(u), r),
        None => (None, rest),
    };
    if rest.contains('?') {
        return Err(
            "query parameters are not supported here: put credentials before the hosts (scheme://user:password@host:port,...)"
                .into(),
        );
    }
    let (rest, name) = match rest.split_once('#') {
        Some((r, n)) => (r, Some(n)),
        None => (rest, None),
    };
    let (authority, db) = match rest.split_once('/') {
        Some((a, d)) => (a, Some(d).filter(|d| !d.is_empty())),
        None => (rest, None),
    };
    let hosts: Vec<&str> = authority.split(',').map(str::trim).collect();
    if hosts.iter().any(|h| h.is_empty()) {
        return Err("expected host:port[,host:port...] after \"://\"".into());
    }
    Ok(MultiHost {
        tls: scheme.starts_with("rediss"),
        userinfo,
        hosts,
        db,
        name,
    })
}

/// True when `host` ends in an explicit `:port` (`h:6379`, `[::1]:6379`).
fn has_port(host: &str) -> bool {
    host.rsplit_once(':').is_some_and(|(h, port)| {
        !port.is_empty()
            && port.bytes().all(|b| b.is_ascii_digit())
            && (!h.starts_with('[') || h.ends_with(']'))
    })
}

impl MultiHost<'_> {
    /// `redis[s]://[userinfo@]host[/db]` for one host, which the `redis` crate parses
    /// (percent-decoding credentials, checking the port).
    fn node_url(&self, host: &str, with_db: bool) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        let auth = self.userinfo.map(|u| format!("{u}@")).unwrap_or_default();
        let db = match (with_db, self.db) {
            (true, Some(db)) => format!("/{db}"),
            _ => String::new(),
        };
        format!("{scheme}://{auth}{host}{db}")
    }

    pub(super) fn node_infos(&self, with_db: bool) -> Result<Vec<redis::ConnectionInfo>, String> {
        self.hosts
            .iter()
            .map(|h| {
                if !has_port(h) {
                    return Err(format!(
                        "{h:?} has no port (expected host:port, [ipv6]:port)"
                    ));
                }
                self.node_url(h, with_db).into_connection_info().map_err(|e| {
                    format!(
                        "{h:?}: {e} (a password holding '#', '/', '?' or '@' must be percent-encoded: %23, %2F, %3F, %40)"
                    )
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_host_urls_split_into_hosts_db_and_name() {
        let p = split_multi_host("redis-sentinel://u:p%40ss@a:1, b:2/3#mymaster").unwrap();
        assert_eq!(p.hosts, ["a:1", "b:2"]);
        assert_eq!(p.db, Some("3"));
        assert_eq!(p.name, Some("mymaster"));
        assert!(!p.tls);
        let infos = p.node_infos(false).unwrap();
        assert_eq!(infos[1].redis_settings().password(), Some("p@ss"));
        assert!(split_multi_host("redis-cluster://a:1,,b:2").is_err());
        let no_port = split_multi_host("redis-cluster://a").unwrap();
        assert!(no_port.node_infos(false).is_err());
        assert!(split_multi_host("rediss-cluster://a:1").unwrap().tls);
    }

    #[test]
    fn redaction_hides_credentials() {
        assert_eq!(
            redact("redis-sentinel://u:secret@a:1,b:2#m"),
            "redis-sentinel://***@a:1,b:2#m"
        );
        assert_eq!(redact("redis://a:1"), "redis://a:1");
        assert_eq!(
            redact("unix:///r.sock?db=0&pass=secret"),
            "unix:///r.sock?***"
        );
        for leaky in [
            "redis-sentinel://:se#cret@a:1#m",
            "redis-sentinel://:se/cret@a:1#m",
            "redis-cluster://a:1?password=secret",
        ] {
            assert!(
                !redact(leaky).contains("cret"),
                "{leaky} -> {}",
                redact(leaky)
            );
        }
    }

    #[test]
    fn passwords_with_url_characters_never_reach_a_host_or_a_message() {
        let p = split_multi_host("redis-sentinel://:se#c/r?et@a:1,b:2/1#m").unwrap();
        assert_eq!(p.userinfo, Some(":se#c/r?et"));
        assert_eq!(p.hosts, ["a:1", "b:2"]);
        assert_eq!((p.db, p.name), (Some("1"), Some("m")));
        let err = split_multi_host("redis-cluster://a:1?password=x")
            .err()
            .unwrap();
        assert!(err.contains("query parameters"), "{err}");
        assert!(!has_port("[::1]") && has_port("[::1]:6379") && !has_port("a") && has_port("a:1"));
    }
}
