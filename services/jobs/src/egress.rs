//! Where webhooks may go: never to this server's own networks unless the operator allows it.
//!
//! Refused by default: loopback (127/8, ::1), unspecified (0/8, ::), private (10/8, 172.16/12,
//! 192.168/16, ULA fc00::/7, site-local fec0::/10), shared address space (CGNAT 100.64/10),
//! link-local (169.254/16, fe80::/10; cloud metadata at 169.254.169.254 and fd00:ec2::254 among
//! them), IETF protocol assignments (192.0.0/24), multicast (224/4, ff00::/8) and reserved
//! (240/4, broadcast). An IPv6 address carrying an IPv4 one (mapped ::ffff:0:0/96,
//! compatible ::/96, NAT64 64:ff9b::/96, 6to4 2002::/16) is judged by the IPv4 address.
//!
//! The rule is applied where it cannot be dodged: at delivery, to every address a webhook's
//! host resolves to, inside the HTTP client's own resolver ([`Resolver`]), so the client
//! connects only to addresses that were checked (a name that resolved to a public address at
//! CreateJob and to 127.0.0.1 now is refused now). CreateJob also refuses at once what needs
//! no lookup: a literal address of a refused class and `localhost` (with its subdomains).
//!
//! [`Policy`] holds the operator's allowlist (`--webhook-allow`, `VOXPOOL_JOBS_WEBHOOK_ALLOW`):
//! CIDRs whose addresses are allowed anyway, and host names allowed whatever they resolve to.

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    sync::{Arc, LazyLock},
};

use ipnet::IpNet;
use voxpool_domain::untrusted::quote;

/// The flag and variable that allow refused targets, for messages.
pub const ALLOW_FLAG: &str = "--webhook-allow (VOXPOOL_JOBS_WEBHOOK_ALLOW)";

/// The IPv4 ranges webhooks may not reach by default, with what each is.
const REFUSED_V4: &[(&str, &str)] = &[
    ("0.0.0.0/8", "unspecified"),
    ("10.0.0.0/8", "private"),
    ("100.64.0.0/10", "shared (CGNAT)"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.169.254/32", "cloud metadata"),
    ("169.254.0.0/16", "link-local"),
    ("172.16.0.0/12", "private"),
    ("192.0.0.0/24", "IETF protocol assignment"),
    ("192.168.0.0/16", "private"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved"),
];

/// The IPv6 ranges webhooks may not reach by default (those carrying an IPv4 address are
/// judged by it, [`embedded_v4`]).
const REFUSED_V6: &[(&str, &str)] = &[
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("fd00:ec2::254/128", "cloud metadata"),
    ("fc00::/7", "private (ULA)"),
    ("fec0::/10", "private (site-local)"),
    ("fe80::/10", "link-local"),
    ("ff00::/8", "multicast"),
];

/// The IPv4 address an IPv6 address carries, if it is of a form that does.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let o = ip.octets();
    let seg = ip.segments();
    let tail = || Ipv4Addr::new(o[12], o[13], o[14], o[15]);
    match seg {
        // IPv4-mapped ::ffff:a.b.c.d and IPv4-compatible ::a.b.c.d (not :: nor ::1).
        [0, 0, 0, 0, 0, 0xffff, _, _] => Some(tail()),
        [0, 0, 0, 0, 0, 0, hi, _] if hi != 0 => Some(tail()),
        // NAT64 64:ff9b::a.b.c.d.
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(tail()),
        // 6to4 2002:aabb:ccdd::.
        [0x2002, ..] => Some(Ipv4Addr::new(o[2], o[3], o[4], o[5])),
        _ => None,
    }
}

/// `table` parsed (every entry is a valid CIDR: the unit tests check each one).
fn parsed(table: &[(&str, &'static str)]) -> Vec<(IpNet, &'static str)> {
    table
        .iter()
        .filter_map(|(net, class)| net.parse().ok().map(|n| (n, *class)))
        .collect()
}

static REFUSED: LazyLock<[Vec<(IpNet, &'static str)>; 2]> =
    LazyLock::new(|| [parsed(REFUSED_V4), parsed(REFUSED_V6)]);

/// What `ip` is, when it is of a class webhooks may not reach by default.
pub fn refused_class(ip: IpAddr) -> Option<&'static str> {
    let ip = match ip {
        IpAddr::V6(v6) => embedded_v4(v6).map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    let table = if ip.is_ipv4() {
        &REFUSED[0]
    } else {
        &REFUSED[1]
    };
    table
        .iter()
        .find_map(|(net, class)| net.contains(&ip).then_some(*class))
}

/// Whether `host` (a URL's host name) names this machine whatever DNS says: `localhost` and its
/// subdomains (RFC 6761).
fn is_localhost(host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    host == "localhost" || host.ends_with(".localhost")
}

/// The operator's allowlist (module doc).
#[derive(Clone, Debug, Default)]
pub struct Policy {
    nets: Vec<IpNet>,
    hosts: Vec<String>,
}

impl Policy {
    /// The allowlist `list` names: comma-separated CIDRs (`10.0.0.0/8`), addresses
    /// (`127.0.0.1`) and host names (`hooks.internal`). Errors: the entry that is none.
    pub fn parse(list: &str) -> Result<Self, String> {
        let mut policy = Self::default();
        for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            if let Ok(net) = entry.parse::<IpNet>() {
                policy.nets.push(net.trunc());
            } else if let Ok(ip) = entry.parse::<IpAddr>() {
                policy.nets.push(IpNet::from(ip));
            } else if url::Host::parse(entry).is_ok_and(|h| matches!(h, url::Host::Domain(_))) {
                policy
                    .hosts
                    .push(entry.trim_end_matches('.').to_ascii_lowercase());
            } else {
                return Err(format!(
                    "{ALLOW_FLAG}: {} is no CIDR, address or host name; give e.g. 127.0.0.1/32,10.0.0.0/8,hooks.internal",
                    quote(entry)
                ));
            }
        }
        Ok(policy)
    }

    /// Whether host name `host` is allowed whatever it resolves to.
    fn allows_host(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        self.hosts.contains(&host)
    }

    /// What `ip` is, when a webhook may not reach it (not allowed by a CIDR of the list).
    pub fn refusal(&self, ip: IpAddr) -> Option<&'static str> {
        let class = refused_class(ip)?;
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        (!self.nets.iter().any(|n| n.contains(&ip))).then_some(class)
    }

    /// CreateJob's check of a `webhook_url` (already a valid http(s) URL): a literal address of
    /// a refused class, or `localhost`, is refused unless allowed. Errors: why, and the flag
    /// that allows it.
    pub fn check_url(&self, url: &url::Url) -> Result<(), String> {
        let (ip, shown) = match url.host() {
            Some(url::Host::Ipv4(v4)) => (IpAddr::V4(v4), v4.to_string()),
            Some(url::Host::Ipv6(v6)) => (IpAddr::V6(v6), v6.to_string()),
            Some(url::Host::Domain(name)) if is_localhost(name) && !self.allows_host(name) => {
                return Err(format!(
                    "{} names this server itself, which webhooks may not reach; give a host the receiver is reachable at from outside, or allow it on every jobs replica with {ALLOW_FLAG} {}",
                    quote(name),
                    name.trim_end_matches('.')
                ));
            }
            _ => return Ok(()),
        };
        match self.refusal(ip) {
            None => Ok(()),
            Some(class) => Err(format!(
                "{shown} is a {class} address, which webhooks may not reach (it could be this server's own network); give a public host, or allow it on every jobs replica with {ALLOW_FLAG} {}",
                IpNet::from(ip)
            )),
        }
    }

    /// Why a delivery to `url` may not be made before any lookup: its host is a literal
    /// address of a refused class (the resolver never sees those).
    pub fn refuse_literal(&self, url: &url::Url) -> Option<String> {
        let ip = match url.host()? {
            url::Host::Ipv4(v4) => IpAddr::V4(v4),
            url::Host::Ipv6(v6) => IpAddr::V6(v6),
            url::Host::Domain(_) => return None,
        };
        let class = self.refusal(ip)?;
        Some(format!(
            "refused: {ip} is a {class} address (allow it with {ALLOW_FLAG})"
        ))
    }
}

/// A host whose every address is refused (the resolver's error).
#[derive(Debug, thiserror::Error)]
#[error("refused: {host} resolves to {ip}, a {class} address (allow it with {ALLOW_FLAG})")]
pub struct Refused {
    /// The host, quoted (it came from a caller).
    host: String,
    ip: IpAddr,
    class: &'static str,
}

/// The deliveries' resolver: the system's lookup, keeping only the addresses [`Policy`] lets
/// a webhook reach (all of them for an allowed host name); none left is a [`Refused`] error,
/// and the client never connects.
#[derive(Clone, Debug)]
pub struct Resolver {
    policy: Arc<Policy>,
}

impl Resolver {
    /// A resolver applying `policy`.
    pub fn new(policy: Arc<Policy>) -> Self {
        Self { policy }
    }

    /// The addresses of `host` a webhook may reach. Errors: the lookup's, or [`Refused`].
    pub async fn lookup(
        &self,
        host: &str,
    ) -> Result<Vec<SocketAddr>, Box<dyn std::error::Error + Send + Sync>> {
        let found: Vec<SocketAddr> = tokio::net::lookup_host((host, 0)).await?.collect();
        if self.policy.allows_host(host) {
            return Ok(found);
        }
        let mut refused = None;
        let kept: Vec<SocketAddr> = found
            .into_iter()
            .filter(|a| match self.policy.refusal(a.ip()) {
                None => true,
                Some(class) => {
                    refused.get_or_insert((a.ip(), class));
                    false
                }
            })
            .collect();
        match (kept.is_empty(), refused) {
            (true, Some((ip, class))) => Err(Box::new(Refused {
                host: quote(host),
                ip,
                class,
            })),
            _ => Ok(kept),
        }
    }
}

impl reqwest::dns::Resolve for Resolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let this = self.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs = this.lookup(&host).await?;
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// The [`Refused`] in `e`'s sources, as its message, if a refusal is what failed it.
pub fn refusal_in(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut at = Some(e);
    while let Some(e) = at {
        if let Some(r) = e.downcast_ref::<Refused>() {
            return Some(r.to_string());
        }
        at = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("an address")
    }

    #[test]
    fn every_range_of_the_tables_parses() {
        assert_eq!(REFUSED[0].len(), REFUSED_V4.len());
        assert_eq!(REFUSED[1].len(), REFUSED_V6.len());
    }

    #[test]
    fn own_network_and_metadata_addresses_are_refused_and_public_ones_are_not() {
        for (addr, class) in [
            ("127.0.0.1", "loopback"),
            ("127.255.0.9", "loopback"),
            ("::1", "loopback"),
            ("0.0.0.0", "unspecified"),
            ("::", "unspecified"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("100.64.0.1", "shared (CGNAT)"),
            ("100.100.100.200", "shared (CGNAT)"),
            ("169.254.169.254", "cloud metadata"),
            ("169.254.170.2", "link-local"),
            ("fd00:ec2::254", "cloud metadata"),
            ("fd12:3456::1", "private (ULA)"),
            ("fe80::1", "link-local"),
            ("224.0.0.1", "multicast"),
            ("ff02::1", "multicast"),
            ("255.255.255.255", "reserved"),
            ("192.0.0.192", "IETF protocol assignment"),
            // IPv6 forms carrying an IPv4 address are judged by it.
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:169.254.169.254", "cloud metadata"),
            ("64:ff9b::a9fe:a9fe", "cloud metadata"),
            ("2002:7f00:1::", "loopback"),
            ("::10.0.0.1", "private"),
        ] {
            assert_eq!(refused_class(ip(addr)), Some(class), "{addr}");
        }
        for addr in [
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "192.0.2.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
        ] {
            assert_eq!(refused_class(ip(addr)), None, "{addr}");
        }
    }

    #[test]
    fn the_allowlist_lets_its_cidrs_and_hosts_through() {
        let p = Policy::parse("127.0.0.1/32, 10.0.0.0/8,hooks.internal,::1").expect("parses");
        assert_eq!(p.refusal(ip("127.0.0.1")), None);
        assert_eq!(p.refusal(ip("::ffff:127.0.0.1")), None);
        assert_eq!(p.refusal(ip("::1")), None);
        assert_eq!(p.refusal(ip("10.200.0.1")), None);
        assert_eq!(p.refusal(ip("127.0.0.2")), Some("loopback"));
        assert_eq!(p.refusal(ip("169.254.169.254")), Some("cloud metadata"));
        assert!(p.allows_host("Hooks.Internal."));
        assert!(!p.allows_host("other.internal"));
        let e = Policy::parse("10.0.0.0/8,not a host!").expect_err("bad entry");
        assert!(
            e.contains("--webhook-allow") && e.contains("not a host!"),
            "{e}"
        );
    }

    #[test]
    fn create_job_refuses_literal_own_addresses_and_localhost_naming_the_flag() {
        let none = Policy::default();
        let url = |s: &str| url::Url::parse(s).expect("url");
        for (raw, what) in [
            ("http://127.0.0.1:6379/", "loopback"),
            ("http://169.254.169.254/latest/meta-data/", "cloud metadata"),
            ("http://[::1]:8080/x", "loopback"),
            ("http://0x7f000001/", "loopback"),
            ("http://10.0.0.5/hook", "private"),
            ("http://localhost:9000/hook", "this server itself"),
            ("http://api.localhost./hook", "this server itself"),
        ] {
            let e = none.check_url(&url(raw)).expect_err(raw);
            assert!(
                e.contains(what) && e.contains("--webhook-allow"),
                "{raw}: {e}"
            );
        }
        assert!(none.check_url(&url("https://hooks.example.com/x")).is_ok());
        let allowed = Policy::parse("127.0.0.1/32,localhost").expect("parses");
        assert!(allowed.check_url(&url("http://127.0.0.1:6379/")).is_ok());
        assert!(allowed.check_url(&url("http://localhost:9000/")).is_ok());
        assert!(allowed.check_url(&url("http://127.0.0.2/")).is_err());
    }

    #[tokio::test]
    async fn the_resolver_keeps_only_addresses_a_webhook_may_reach() {
        let strict = Resolver::new(Arc::default());
        let e = strict.lookup("localhost").await.expect_err("localhost");
        let why = refusal_in(e.as_ref()).expect("a refusal");
        assert!(
            why.contains("\"localhost\" resolves to") && why.contains("loopback"),
            "{why}"
        );
        let by_cidr = Resolver::new(Arc::new(Policy::parse("127.0.0.0/8,::1").expect("ok")));
        let found = by_cidr.lookup("localhost").await.expect("allowed");
        assert!(found.iter().all(|a| a.ip().is_loopback()) && !found.is_empty());
        let by_name = Resolver::new(Arc::new(Policy::parse("localhost").expect("ok")));
        assert!(
            !by_name
                .lookup("localhost")
                .await
                .expect("allowed")
                .is_empty()
        );
    }
}
