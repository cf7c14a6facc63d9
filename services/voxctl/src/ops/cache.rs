//! `voxctl cache stats|purge`: synthesis's audio cache through `SynthesisAdmin`. Every call
//! carries `authorization: Bearer $VOXPOOL_ADMIN_TOKEN`, as the catalog's admin calls do.

use std::fmt::Write as _;

use tonic::{codegen::InterceptedService, transport::Channel};
use voxpool_proto::synthesis::v1::{
    CacheStats, GetCacheStatsRequest, PurgeCacheRequest, PurgeCacheResponse,
    synthesis_admin_client::SynthesisAdminClient,
};

use super::OpError;
use crate::{
    connect::{self, AdminToken},
    console::human_bytes,
};

/// The SynthesisAdmin client of a `cache` command.
pub struct Cache {
    admin: SynthesisAdminClient<InterceptedService<Channel, AdminToken>>,
    /// `synthesis at URL`, named in every error.
    service: String,
}

/// What `voxctl cache purge` deletes: a pack, a snapshot digest, or that snapshot of that pack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PurgeTarget {
    /// `--pack`.
    pub pack: Option<String>,
    /// `--snapshot-digest`.
    pub snapshot_digest: Option<String>,
}

impl PurgeTarget {
    /// The target, refused (exit 2, naming both flags) when neither is given.
    pub fn new(pack: Option<String>, snapshot_digest: Option<String>) -> Result<Self, OpError> {
        if pack.is_none() && snapshot_digest.is_none() {
            return Err(OpError::usage(
                "cache purge needs --pack PACK_ID, --snapshot-digest sha256:HEX, or both",
            ));
        }
        Ok(Self {
            pack,
            snapshot_digest,
        })
    }

    /// `pack vp_1`, `snapshot sha256:…`, `snapshot sha256:… of pack vp_1`.
    pub fn describe(&self) -> String {
        match (&self.pack, &self.snapshot_digest) {
            (Some(pack), None) => format!("pack {pack}"),
            (None, Some(digest)) => format!("snapshot {digest}"),
            (Some(pack), Some(digest)) => format!("snapshot {digest} of pack {pack}"),
            (None, None) => "nothing".to_owned(),
        }
    }
}

impl Cache {
    /// A client for synthesis at `url`, authorized with the admin `token`.
    pub fn new(url: &str, token: Option<&str>) -> Result<Self, OpError> {
        let channel = connect::channel(url)?;
        let token = AdminToken::new(token).map_err(OpError::usage)?;
        Ok(Self {
            admin: SynthesisAdminClient::with_interceptor(channel, token),
            service: format!("synthesis at {url}"),
        })
    }

    /// `GetCacheStats`.
    pub async fn stats(&mut self) -> Result<CacheStats, OpError> {
        self.admin
            .get_cache_stats(GetCacheStatsRequest {})
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| OpError::status("GetCacheStats", &self.service, &s))
    }

    /// `PurgeCache` of `target`.
    pub async fn purge(&mut self, target: &PurgeTarget) -> Result<PurgeCacheResponse, OpError> {
        self.admin
            .purge_cache(PurgeCacheRequest {
                pack_id: target.pack.clone().unwrap_or_default(),
                snapshot_digest: target.snapshot_digest.clone().unwrap_or_default(),
            })
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| OpError::status("PurgeCache", &self.service, &s))
    }
}

fn bytes(n: i64) -> String {
    let n = u64::try_from(n).unwrap_or(0);
    if n < 1024 {
        format!("{n} bytes")
    } else {
        format!("{n} bytes ({})", human_bytes(n))
    }
}

/// `name value` lines for the totals, then a table of the per-pool counters.
pub fn render_stats(stats: &CacheStats) -> String {
    let enabled = if stats.enabled {
        "yes".to_owned()
    } else {
        "no (synthesis runs with --cache off: nothing is stored or counted)".to_owned()
    };
    let max_bytes = if stats.max_bytes > 0 {
        bytes(stats.max_bytes)
    } else {
        "none (a cloud store is bounded by its TTL)".to_owned()
    };
    let fields = [
        ("enabled", enabled),
        ("location", stats.location.clone()),
        ("entries", stats.entries.to_string()),
        ("bytes", bytes(stats.bytes)),
        ("max bytes", max_bytes),
        ("evictions", stats.evictions.to_string()),
    ];
    let mut out = String::new();
    for (name, value) in &fields {
        let _ = writeln!(out, "{} {value}", crate::console::pad(name, 10));
    }
    out.push('\n');
    if stats.pools.is_empty() {
        out.push_str("no pool used the cache on this replica since it started");
        return out;
    }
    let header = [
        "POOL",
        "HITS",
        "MISSES",
        "FILLS",
        "COALESCED",
        "CHARS SAVED",
        "BYTES STORED",
    ];
    let rows: Vec<[String; 7]> = stats
        .pools
        .iter()
        .map(|p| {
            [
                p.pool.clone(),
                p.hits.to_string(),
                p.misses.to_string(),
                p.fills.to_string(),
                p.coalesced.to_string(),
                p.characters_saved.to_string(),
                p.bytes_stored.to_string(),
            ]
        })
        .collect();
    out.push_str(&crate::console::table(&header, &rows));
    out
}

/// `purged N entries (X bytes) of pack …`.
pub fn render_purge(purged: &PurgeCacheResponse, target: &PurgeTarget) -> String {
    let entries = if purged.deleted_entries == 1 {
        "entry"
    } else {
        "entries"
    };
    let size = u64::try_from(purged.deleted_bytes).unwrap_or(0);
    let readable = if size < 1024 {
        String::new()
    } else {
        format!(", {}", human_bytes(size))
    };
    format!(
        "purged {} {entries} ({size} bytes{readable}) of {}",
        purged.deleted_entries,
        target.describe()
    )
}

#[cfg(test)]
mod tests {
    use voxpool_proto::synthesis::v1::PoolCacheStats;

    use super::*;

    #[test]
    fn stats_show_the_totals_with_readable_sizes_and_an_aligned_table_per_pool() {
        let stats = CacheStats {
            enabled: true,
            location: "file:///var/lib/voxpool/blobs/cache".into(),
            entries: 1234,
            bytes: 56_789_012,
            max_bytes: 1 << 30,
            evictions: 3,
            pools: vec![
                PoolCacheStats {
                    pool: "espeak-local".into(),
                    hits: 120,
                    misses: 30,
                    fills: 30,
                    coalesced: 2,
                    characters_saved: 4512,
                    bytes_stored: 1_234_567,
                },
                PoolCacheStats {
                    pool: "volc".into(),
                    hits: 7,
                    ..PoolCacheStats::default()
                },
            ],
        };
        let text = render_stats(&stats);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "enabled    yes");
        assert_eq!(lines[3], "bytes      56789012 bytes (54.2 MiB)");
        assert_eq!(lines[4], "max bytes  1073741824 bytes (1.0 GiB)");
        assert_eq!(lines[5], "evictions  3");
        assert_eq!(
            lines[7],
            "POOL          HITS  MISSES  FILLS  COALESCED  CHARS SAVED  BYTES STORED"
        );
        assert_eq!(
            lines[8],
            "espeak-local  120   30      30     2          4512         1234567"
        );
        assert_eq!(
            lines[9],
            "volc          7     0       0      0          0            0"
        );
        let off = render_stats(&CacheStats::default());
        assert!(
            off.starts_with("enabled    no (synthesis runs with --cache off"),
            "{off}"
        );
        assert!(off.contains("max bytes  none"), "{off}");
        assert!(off.ends_with("no pool used the cache on this replica since it started"));
    }

    #[test]
    fn a_purge_needs_a_pack_or_a_snapshot_and_says_what_it_deleted() {
        let refused = PurgeTarget::new(None, None).expect_err("refused");
        assert_eq!(refused.exit_code, 2);
        assert!(
            refused.message.contains("--pack") && refused.message.contains("--snapshot-digest"),
            "{}",
            refused.message
        );
        let pack = PurgeTarget::new(Some("vp_1".into()), None).expect("pack");
        let purged = PurgeCacheResponse {
            deleted_entries: 12,
            deleted_bytes: 3_456_789,
        };
        assert_eq!(
            render_purge(&purged, &pack),
            "purged 12 entries (3456789 bytes, 3.3 MiB) of pack vp_1"
        );
        let both = PurgeTarget::new(Some("vp_1".into()), Some("sha256:ab".into())).expect("both");
        let one = PurgeCacheResponse {
            deleted_entries: 1,
            deleted_bytes: 10,
        };
        assert_eq!(
            render_purge(&one, &both),
            "purged 1 entry (10 bytes) of snapshot sha256:ab of pack vp_1"
        );
    }
}
