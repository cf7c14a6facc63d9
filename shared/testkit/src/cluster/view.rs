//! What one node says about the cluster: `CLUSTER NODES` parsed, and whether that view is a
//! fully formed cluster.

use crate::redis_cli::info_field;

/// Redis Cluster's slot count.
pub(super) const SLOTS: u16 = 16384;

/// Why a node's view is not a fully formed cluster, if it is not.
pub(super) fn cluster_problem(
    info: &str,
    view: &[NodeEntry],
    total: usize,
    masters: usize,
    replicas: usize,
) -> Option<String> {
    if info_field(info, "cluster_state") != Some("ok") {
        return Some("cluster_state is not ok".to_owned());
    }
    if view.len() != total {
        return Some(format!("knows {} nodes, not {total}", view.len()));
    }
    if let Some(bad) = view
        .iter()
        .find(|e| e.failing() || e.has("handshake") || e.has("noaddr"))
    {
        return Some(format!(
            "node {} is flagged {}",
            bad.port,
            bad.flags.join(",")
        ));
    }
    if let Some(bad) = view.iter().find(|e| !e.has("myself") && !e.connected) {
        return Some(format!("its link to node {} is down", bad.port));
    }
    let serving: Vec<&NodeEntry> = view.iter().filter(|e| !e.slots.is_empty()).collect();
    if serving.len() != masters {
        return Some(format!(
            "{} masters serve slots, not {masters}",
            serving.len()
        ));
    }
    let covered: u32 = serving
        .iter()
        .flat_map(|e| &e.slots)
        .map(|&(a, b)| u32::from(b - a) + 1)
        .sum();
    if covered != u32::from(SLOTS) {
        return Some(format!("{covered} slots are assigned, not {SLOTS}"));
    }
    for master in serving {
        let have = view
            .iter()
            .filter(|e| e.master.as_deref() == Some(master.id.as_str()))
            .count();
        if have != replicas {
            return Some(format!(
                "master {} has {have} replicas, not {replicas}",
                master.port
            ));
        }
    }
    None
}

/// One line of `CLUSTER NODES`.
pub(super) struct NodeEntry {
    pub(super) id: String,
    pub(super) port: u16,
    pub(super) flags: Vec<String>,
    /// The master's id, for replicas.
    pub(super) master: Option<String>,
    pub(super) connected: bool,
    /// Owned slot ranges, inclusive (importing/migrating markers are left out).
    pub(super) slots: Vec<(u16, u16)>,
}

impl NodeEntry {
    pub(super) fn has(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }

    pub(super) fn failing(&self) -> bool {
        self.has("fail") || self.has("fail?")
    }
}

/// Parses `CLUSTER NODES`:
/// `<id> <ip:port@cport[,hostname]> <flags> <master|-> <ping> <pong> <epoch> <link> <slot>...`.
pub(super) fn parse_nodes(raw: &str) -> Vec<NodeEntry> {
    raw.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 8 {
                return None;
            }
            let address = fields[1].split(['@', ',']).next().unwrap_or_default();
            let port = address
                .rsplit_once(':')
                .and_then(|(_, port)| port.parse().ok())
                .unwrap_or(0);
            let slots = fields[8..]
                .iter()
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| match s.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => s.parse().ok().map(|n| (n, n)),
                })
                .collect();
            Some(NodeEntry {
                id: fields[0].to_owned(),
                port,
                flags: fields[2].split(',').map(str::to_owned).collect(),
                master: (fields[3] != "-").then(|| fields[3].to_owned()),
                connected: fields[7] == "connected",
                slots,
            })
        })
        .collect()
}

/// Whether `ranges` cover every slot in `first..=last`.
pub(super) fn owns(ranges: &[(u16, u16)], first: u16, last: u16) -> bool {
    ranges.iter().any(|&(a, b)| a <= first && last <= b)
}
