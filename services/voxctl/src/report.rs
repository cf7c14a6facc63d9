//! The per-item report (`--report FILE`, JSON) and the final summary printed to stderr.

use std::{collections::HashMap, path::Path, time::Duration};

use serde::Serialize;

/// What became of an item.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Its file is in place (this run, or an earlier one when `resumed`).
    Ok,
    /// It failed (this run, or an earlier one when `resumed` and not retried).
    Failed,
    /// Its manifest line is invalid.
    Invalid,
    /// The run was interrupted before it finished.
    NotStarted,
}

/// One item in the report.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ItemReport {
    /// Item id (absent for a line without a readable id).
    pub id: Option<String>,
    /// Manifest line.
    pub line: usize,
    /// Outcome.
    pub status: Status,
    /// Whether the outcome comes from the checkpoint of an earlier run.
    pub resumed: bool,
    /// Synthesize calls made.
    pub attempts: u32,
    /// Vendor keys used or tried (`upstream/key`).
    pub keys: Vec<String>,
    /// gRPC code name or local error class.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// The error (the server's message for gRPC errors).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Output file name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// Parts the text was split into.
    pub parts: usize,
    /// Characters of text.
    pub chars: usize,
    /// Text chunks of the parts that came back, as synthesis split them (a resumed item: as
    /// its earlier run recorded them; 0 from a checkpoint older than this count).
    pub chunks: u64,
    /// Of `chunks`, those served from synthesis's audio cache.
    pub cached_chunks: u64,
}

/// Totals of a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Manifest lines that hold an item (valid or not).
    pub items: usize,
    /// Items whose file is in place.
    pub ok: usize,
    /// Of `ok`, done by an earlier run.
    pub ok_resumed: usize,
    /// Items that failed.
    pub failed: usize,
    /// Of `failed`, failed in an earlier run and not retried (`--retry-failed` redoes them).
    pub failed_resumed: usize,
    /// Invalid manifest lines.
    pub invalid: usize,
    /// Items not finished because the run was interrupted.
    pub not_started: usize,
    /// Wall time of this run, seconds.
    pub wall_seconds: f64,
    /// Items finished (ok or failed) by this run per second.
    pub items_per_second: f64,
    /// Characters synthesized by this run per second.
    pub chars_per_second: f64,
    /// Synthesize calls made by this run.
    pub calls: u64,
    /// Of `calls`, retries.
    pub retries: u64,
    /// Text chunks of the responses this run received (items of earlier runs not included).
    pub chunks: u64,
    /// Of `chunks`, those served from synthesis's audio cache.
    pub cached_chunks: u64,
    /// Times the circuit breaker opened.
    pub breaker_trips: u64,
    /// Whether a Ctrl-C stopped the run.
    pub interrupted: bool,
    /// Whether the run ended by itself after `--give-up-after` without progress.
    pub gave_up: bool,
    /// Most frequent errors of failed items (`CODE: message`) with their counts, most
    /// frequent first (at most 5).
    pub top_errors: Vec<(String, usize)>,
    /// Distinct errors of failed items left out of `top_errors`, and how many items they
    /// cover.
    pub more_errors: (usize, usize),
    /// Most frequent manifest problems of invalid lines, apart from `top_errors` so that many
    /// bad lines cannot hide why items failed (at most 3).
    pub top_invalid: Vec<(String, usize)>,
    /// Distinct problems left out of `top_invalid`, and how many lines they cover.
    pub more_invalid: (usize, usize),
}

impl Summary {
    /// Whether every item succeeded.
    pub fn all_ok(&self) -> bool {
        self.ok == self.items
    }
}

/// The `--report` document.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The manifest path.
    pub manifest: String,
    /// Its digest.
    pub manifest_digest: String,
    /// The output directory.
    pub out: String,
    /// Totals.
    pub summary: Summary,
    /// Every manifest item, in manifest order.
    pub items: Vec<ItemReport>,
}

impl Report {
    /// Writes the report atomically (temp file + rename) as pretty JSON.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let json = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let name = path
            .file_name()
            .ok_or_else(|| std::io::Error::other("--report needs a file name"))?;
        crate::output::write_atomic(dir, &name.to_string_lossy(), &json)
    }
}

/// Fills `summary`'s counts and top errors from the item reports.
pub fn tally(items: &[ItemReport], wall: Duration, summary: &mut Summary) {
    summary.items = items.len();
    let mut errors: HashMap<String, usize> = HashMap::new();
    let mut invalid: HashMap<String, usize> = HashMap::new();
    for item in items {
        match item.status {
            Status::Ok => {
                summary.ok += 1;
                summary.ok_resumed += usize::from(item.resumed);
            }
            Status::Failed => {
                summary.failed += 1;
                summary.failed_resumed += usize::from(item.resumed);
            }
            Status::Invalid => summary.invalid += 1,
            Status::NotStarted => summary.not_started += 1,
        }
        if let (Some(error), false) = (&item.error, item.resumed) {
            let code = item.code.as_deref().unwrap_or("MANIFEST");
            let tally = if item.status == Status::Invalid {
                &mut invalid
            } else {
                &mut errors
            };
            *tally
                .entry(format!("{code}: {}", truncate(error, 160)))
                .or_default() += 1;
        }
    }
    (summary.top_errors, summary.more_errors) = most_frequent(errors, 5);
    (summary.top_invalid, summary.more_invalid) = most_frequent(invalid, 3);
    summary.wall_seconds = wall.as_secs_f64();
}

/// The `n` most frequent entries, most frequent first, and (distinct entries, total count) of
/// the rest.
fn most_frequent(
    counts: HashMap<String, usize>,
    n: usize,
) -> (Vec<(String, usize)>, (usize, usize)) {
    let mut top: Vec<_> = counts.into_iter().collect();
    top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let rest = top.split_off(n.min(top.len()));
    let more = (rest.len(), rest.iter().map(|(_, count)| count).sum());
    (top, more)
}

fn truncate(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

/// The human summary (several lines, no trailing newline).
pub fn render(summary: &Summary) -> String {
    let mut lines = vec![format!(
        "voxctl: {} items: {} ok ({} from earlier runs), {} failed{}, {} invalid, {} not started",
        summary.items,
        summary.ok,
        summary.ok_resumed,
        summary.failed,
        if summary.failed_resumed > 0 {
            format!(
                " ({} from earlier runs; --retry-failed redoes them)",
                summary.failed_resumed
            )
        } else {
            String::new()
        },
        summary.invalid,
        summary.not_started,
    )];
    lines.push(format!(
        "voxctl: wall {:.1}s, {:.1} items/s, {:.0} chars/s, {} calls ({} retries), circuit breaker opened {} time(s){}",
        summary.wall_seconds,
        summary.items_per_second,
        summary.chars_per_second,
        summary.calls,
        summary.retries,
        summary.breaker_trips,
        match (summary.interrupted, summary.gave_up) {
            (_, true) => ", gave up (--give-up-after)",
            (true, false) => ", interrupted",
            (false, false) => "",
        },
    ));
    if summary.chunks > 0 {
        lines.push(format!(
            "voxctl: {}",
            cache_line(summary.cached_chunks, summary.chunks)
        ));
    }
    for (title, top, (kinds, count), what) in [
        (
            "top errors of failed items",
            &summary.top_errors,
            summary.more_errors,
            "item(s)",
        ),
        (
            "top problems of invalid lines",
            &summary.top_invalid,
            summary.more_invalid,
            "line(s)",
        ),
    ] {
        if !top.is_empty() {
            lines.push(format!("voxctl: {title}:"));
            for (error, n) in top {
                lines.push(format!("  {n:>6} × {error}"));
            }
            if kinds > 0 {
                lines.push(format!(
                    "  … and {kinds} more kind(s) on {count} {what} (--report FILE lists every item)"
                ));
            }
        }
    }
    lines.join("\n")
}

/// `cache: N of M chunks served from the cache (P%)`.
pub fn cache_line(cached: u64, chunks: u64) -> String {
    let share = if chunks > 0 {
        cached as f64 * 100.0 / chunks as f64
    } else {
        0.0
    };
    format!("cache: {cached} of {chunks} chunks served from the cache ({share:.0}%)")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(status: Status, resumed: bool, error: Option<&str>) -> ItemReport {
        ItemReport {
            id: Some("a".into()),
            line: 1,
            status,
            resumed,
            attempts: 1,
            keys: vec![],
            code: error.map(|_| "UNAVAILABLE".into()),
            error: error.map(Into::into),
            file: None,
            parts: 1,
            chars: 3,
            chunks: 1,
            cached_chunks: 0,
        }
    }

    #[test]
    fn tally_counts_every_status_and_ranks_errors_of_this_run() {
        let items = [
            item(Status::Ok, false, None),
            item(Status::Ok, true, None),
            item(Status::Failed, false, Some("down")),
            item(Status::Failed, false, Some("down")),
            item(Status::Failed, true, Some("old")),
            item(Status::Invalid, false, None),
            item(Status::NotStarted, false, None),
        ];
        let mut bad_lines: Vec<ItemReport> = (0..9)
            .map(|i| ItemReport {
                code: None,
                error: Some(format!("line {i}: missing text")),
                ..item(Status::Invalid, false, None)
            })
            .collect();
        bad_lines.extend(items.iter().cloned());
        let mut many_invalid = Summary::default();
        tally(&bad_lines, Duration::from_secs(1), &mut many_invalid);
        assert_eq!(
            many_invalid.top_errors,
            [("UNAVAILABLE: down".to_owned(), 2)],
            "invalid lines never push a failure out of the list"
        );
        assert_eq!(many_invalid.top_invalid.len(), 3);
        assert_eq!(
            many_invalid.more_invalid,
            (6, 6),
            "the problems left out are counted"
        );
        let rendered = render(&many_invalid);
        assert!(
            rendered.contains("… and 6 more kind(s) on 6 line(s)"),
            "the summary says what it left out: {rendered}"
        );
        let mut s = Summary::default();
        tally(&items, Duration::from_secs(2), &mut s);
        assert_eq!(
            (s.items, s.ok, s.ok_resumed, s.failed, s.failed_resumed),
            (7, 2, 1, 3, 1)
        );
        assert_eq!((s.invalid, s.not_started), (1, 1));
        assert_eq!(s.top_errors, [("UNAVAILABLE: down".to_owned(), 2)]);
        assert!(!s.all_ok());
        let text = render(&s);
        assert!(
            text.contains("7 items: 2 ok") && text.contains("2 × UNAVAILABLE: down"),
            "{text}"
        );
    }

    #[test]
    fn the_summary_says_how_many_chunks_the_cache_served_only_when_chunks_came_back() {
        let mut s = Summary {
            items: 2,
            ok: 2,
            calls: 3,
            chunks: 8,
            cached_chunks: 6,
            ..Summary::default()
        };
        let text = render(&s);
        assert_eq!(
            text.lines().nth(2),
            Some("voxctl: cache: 6 of 8 chunks served from the cache (75%)"),
            "{text}"
        );
        s.chunks = 0;
        s.cached_chunks = 0;
        assert!(!render(&s).contains("cache:"), "nothing came back this run");
        let json = serde_json::to_value(item(Status::Ok, false, None)).expect("json");
        assert_eq!(
            (json["chunks"].as_u64(), json["cachedChunks"].as_u64()),
            (Some(1), Some(0))
        );
    }
}
