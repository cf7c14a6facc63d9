//! Requests checked at the edge before the domain sees them. CreateJob's input: every problem
//! is collected (field path and what to change) and answered at once as INVALID_ARGUMENT with
//! a `BadRequest`; a job is queued whole or not at all (a `manifest_uri`'s lines are read by
//! [`super::manifest`]). Also job and item names, pages, page tokens and item filters.

use std::collections::HashMap;

use voxpool_domain::{
    contract::check_tenant, reference::is_tag, snapshot::Snapshot, untrusted::check_field,
};
use voxpool_proto::{
    jobs::v1::{CreateJobRequest, JobItemSpec, job_item_spec::Voice},
    scheduler::v1::Priority,
    synthesis::v1::AudioFormat,
};

use crate::{
    error::JobsError,
    model::{ItemState, parse_job_name},
    store::Cursor,
};

/// Most items of one job (inline or from a manifest).
pub const MAX_ITEMS: usize = 10_000;
/// Longest text of one item, in characters (synthesis's default `max_text_chars`).
pub const MAX_TEXT_CHARS: usize = 20_000;
/// Longest `request_id`.
pub const MAX_REQUEST_ID_CHARS: usize = 128;
/// Most problems one answer lists.
const MAX_VIOLATIONS: usize = 50;

/// A checked CreateJob.
#[derive(Debug)]
pub struct Checked {
    /// Items in order, with their characters.
    pub items: Vec<(String, JobItemSpec)>,
    /// Characters of all items.
    pub characters: i64,
    /// The class the items run in.
    pub priority: Priority,
}

/// Problems found so far (each a field and why), answered together: the first
/// [`MAX_VIOLATIONS`] kept, the others counted (a manifest of a million bad lines holds 50).
#[derive(Default)]
pub struct Problems {
    kept: Vec<(String, String)>,
    dropped: usize,
}

impl Problems {
    /// One more problem of `field`.
    pub fn add(&mut self, field: impl Into<String>, why: impl Into<String>) {
        if self.kept.len() < MAX_VIOLATIONS {
            self.kept.push((field.into(), why.into()));
        } else {
            self.dropped += 1;
        }
    }

    /// The problems kept: (field, why).
    pub fn kept(&self) -> &[(String, String)] {
        &self.kept
    }

    fn into_result(self) -> Result<(), JobsError> {
        let Some((field, why)) = self.kept.first() else {
            return Ok(());
        };
        let more = match (self.kept.len() - 1, self.dropped) {
            (0, _) => String::new(),
            (n, 0) => format!(" (and {n} more problems, listed in the BadRequest details)"),
            (n, d) => format!(
                " (and {} more problems; the BadRequest details list the first {MAX_VIOLATIONS})",
                n + d
            ),
        };
        Err(JobsError::BadRequest {
            message: format!("invalid {field}: {why}{more}; nothing was queued"),
            violations: self.kept,
        })
    }
}

/// Where a job's items came from, for naming a bad one: `items[3].text`, or the manifest's
/// line and key (`manifest_uri line 7` with "packId: empty").
pub enum Source {
    /// CreateJob's `items`.
    Items,
    /// A `manifest_uri` manifest: the 1-based line of each item.
    Manifest(Vec<usize>),
}

impl Source {
    /// The request field the items came in.
    fn field(&self) -> &'static str {
        match self {
            Source::Items => "items",
            Source::Manifest(_) => "manifest_uri",
        }
    }

    /// The field of item `i`'s `key` (a `JobItemSpec` field) and the description to give.
    fn at(&self, i: usize, key: &str, description: String) -> (String, String) {
        match self {
            Source::Items => (format!("items[{i}].{key}"), description),
            Source::Manifest(lines) => {
                let line = lines.get(i).copied().unwrap_or(i + 1);
                let key = match key {
                    "pack_id" => "packId",
                    "snapshot_json" => "snapshot",
                    "voice" => "packId or snapshot",
                    other => other,
                };
                (
                    format!("manifest_uri line {line}"),
                    format!("{key}: {description}"),
                )
            }
        }
    }

    /// How item `i` is named inside a description.
    fn name(&self, i: usize) -> String {
        match self {
            Source::Items => format!("items[{i}]"),
            Source::Manifest(lines) => format!("line {}", lines.get(i).copied().unwrap_or(i + 1)),
        }
    }
}

/// Checks `req` (module doc); `items` are the request's or the manifest's, named by `source`
/// in problems, and `p` holds those found reading them (a manifest's unreadable lines); a
/// `webhook_url` is checked against `webhooks` too: every problem is answered at once.
pub fn check(
    req: &CreateJobRequest,
    items: Vec<JobItemSpec>,
    source: &Source,
    mut p: Problems,
    webhooks: &crate::egress::Policy,
) -> Result<Checked, JobsError> {
    let priority = check_settings(req, &mut p, webhooks);
    let field = source.field();
    if items.is_empty() {
        p.add(
            field,
            "the job has no items: give items or a manifest_uri with at least one line",
        );
    }
    if items.len() > MAX_ITEMS {
        p.add(
            field,
            format!(
                "{} items: at most {MAX_ITEMS} per job; split it into several jobs",
                items.len()
            ),
        );
    }
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut characters = 0i64;
    for (i, item) in items.iter().enumerate().take(MAX_ITEMS) {
        let mut add = |key: &str, description: String| {
            let (field, description) = source.at(i, key, description);
            p.add(field, description);
        };
        if let Err(e) = voxpool_domain::item::check_item_id(&item.id) {
            add("id", e.clone());
        } else if let Some(first) = seen.insert(&item.id, i) {
            add(
                "id",
                format!("duplicate id (first at {})", source.name(first)),
            );
        }
        characters += check_item(item, &mut add);
    }
    p.into_result()?;
    Ok(Checked {
        items: items.into_iter().map(|i| (i.id.clone(), i)).collect(),
        characters,
        priority,
    })
}

/// Checks the job-wide fields of `req` (request id, tenant, format, sample rate, priority,
/// webhook), adding each problem to `p`; returns the class its items run in.
fn check_settings(
    req: &CreateJobRequest,
    p: &mut Problems,
    webhooks: &crate::egress::Policy,
) -> Priority {
    if let Err(e) = check_field(&req.request_id, MAX_REQUEST_ID_CHARS) {
        p.add("request_id", e.to_string());
    }
    if let Err(e) = check_tenant(&req.tenant) {
        p.add("tenant", e.to_string());
    }
    match AudioFormat::try_from(req.format) {
        Ok(_) => {}
        Err(_) => p.add(
            "format",
            format!(
                "unknown format {}: use WAV, MP3, OGG_OPUS or PCM",
                req.format
            ),
        ),
    }
    if req.sample_rate_hz != 0 && !(8_000..=192_000).contains(&req.sample_rate_hz) {
        p.add(
            "sample_rate_hz",
            format!(
                "{} Hz: use 0 (the vendor's default) or 8000..=192000",
                req.sample_rate_hz
            ),
        );
    }
    let priority = match Priority::try_from(req.priority) {
        Ok(Priority::Unspecified | Priority::Batch) => Priority::Batch,
        Ok(Priority::Standard) => Priority::Standard,
        Ok(Priority::Interactive) => {
            p.add("priority", "INTERACTIVE is for characters speaking now, not jobs: use BATCH (the default) or STANDARD");
            Priority::Batch
        }
        Err(_) => {
            p.add(
                "priority",
                format!("unknown priority {}: use BATCH or STANDARD", req.priority),
            );
            Priority::Batch
        }
    };
    if !req.webhook_url.is_empty()
        && let Err(e) =
            crate::webhook::check_url(&req.webhook_url).and_then(|url| webhooks.check_url(&url))
    {
        p.add("webhook_url", e);
    }
    priority
}

/// Checks one item's text, voice and emotion, adding each problem with `add` (its key and
/// why); returns its characters.
fn check_item(item: &JobItemSpec, add: &mut impl FnMut(&str, String)) -> i64 {
    let chars = item.text.chars().count();
    if item.text.trim().is_empty() {
        add("text", "empty: give the text to speak".into());
    } else if !voxpool_domain::text::has_speech(&item.text) {
        add(
            "text",
            "has nothing to speak: it holds no letter or digit (only punctuation, symbols or spaces); give words".into(),
        );
    } else if chars > MAX_TEXT_CHARS {
        add(
            "text",
            format!(
                "{chars} characters: at most {MAX_TEXT_CHARS} per item; split it into several items"
            ),
        );
    }
    match &item.voice {
        None => add(
            "voice",
            "missing: give one of pack_id, snapshot, snapshot_json".into(),
        ),
        Some(Voice::PackId(id)) if id.trim().is_empty() => add("pack_id", "empty".into()),
        Some(Voice::PackId(_)) => {}
        Some(Voice::Snapshot(s)) if s.digest.is_empty() || s.pack_id.is_empty() => {
            add("snapshot", "not a frozen snapshot (no pack_id or digest): send FreezeSnapshot's answer as it is".into());
        }
        Some(Voice::Snapshot(s)) => {
            let sealed = Snapshot::from_pb(s).and_then(|s| s.verify_digest());
            if let Err(e) = sealed {
                add("snapshot", e.to_string());
            }
        }
        Some(Voice::SnapshotJson(json)) => {
            if let Err(e) = Snapshot::from_json(json).and_then(|s| s.verify_digest()) {
                add("snapshot_json", e.to_string());
            }
        }
    }
    if !item.emotion.is_empty() && !is_tag(&item.emotion) {
        add("emotion", "not a clip tag: use [a-z0-9_-]{1,32}".into());
    }
    i64::try_from(chars).unwrap_or(i64::MAX)
}

/// ListJobs' `page_token`: empty for the first page, else a cursor this service gave.
pub fn jobs_page_token(token: &str) -> Result<Option<Cursor>, JobsError> {
    if token.is_empty() {
        return Ok(None);
    }
    Cursor::parse(token)
        .map(Some)
        .ok_or_else(|| JobsError::invalid("page_token", NOT_OUR_TOKEN))
}

const NOT_OUR_TOKEN: &str = "not a token this service gave: pass next_page_token as it came";

/// A page's offset (from `token`, empty for the first page) and size (`size`, 0 for 100).
pub fn page(size: i32, token: &str) -> Result<(usize, usize), JobsError> {
    let size = match size {
        0 => 100,
        1..=1000 => usize::try_from(size).unwrap_or(100),
        _ => {
            return Err(JobsError::invalid(
                "page_size",
                format!("{size}: use 1..=1000, or 0 for 100"),
            ));
        }
    };
    let offset = if token.is_empty() {
        0
    } else {
        token
            .parse()
            .map_err(|_| JobsError::invalid("page_token", NOT_OUR_TOKEN))?
    };
    Ok((offset, size))
}

/// The job id of `jobs/{job}`.
pub fn job_id(name: &str) -> Result<&str, JobsError> {
    parse_job_name(name).map_err(|e| JobsError::invalid("name", e))
}

/// The job and item ids of `jobs/{job}/items/{item}`.
pub fn item_name(name: &str) -> Result<(&str, &str), JobsError> {
    let bad = || {
        JobsError::invalid(
            "name",
            format!(
                "expected jobs/{{job}}/items/{{item}}, got {}",
                voxpool_domain::untrusted::quote(name)
            ),
        )
    };
    let (job, item) = name
        .strip_prefix("jobs/")
        .and_then(|rest| rest.split_once("/items/"))
        .ok_or_else(bad)?;
    // The job part is checked as a whole name would be (a slash in it is no job).
    let job_name = &name[..5 + job.len()];
    let job = parse_job_name(job_name).map_err(|_| bad())?;
    voxpool_domain::item::check_item_id(item).map_err(|e| JobsError::invalid("name", e))?;
    Ok((job, item))
}

/// `""` or `state = <STATE>` (spaces optional).
pub fn item_filter(filter: &str) -> Result<Option<ItemState>, JobsError> {
    let filter = filter.trim();
    if filter.is_empty() {
        return Ok(None);
    }
    filter
        .split_once('=')
        .filter(|(k, _)| k.trim() == "state")
        .and_then(|(_, v)| ItemState::parse_name(v.trim()))
        .map(Some)
        .ok_or_else(|| {
            JobsError::invalid(
                "filter",
                format!(
                    "{}: use state = QUEUED, RUNNING, SUCCEEDED, FAILED or CANCELLED",
                    voxpool_domain::untrusted::quote(filter)
                ),
            )
        })
}

#[cfg(test)]
mod tests {
    use tonic::{Code, Status};

    use super::*;

    #[test]
    fn filters_name_one_state_or_none() {
        assert_eq!(item_filter("").ok(), Some(None));
        assert_eq!(
            item_filter("state = FAILED").ok(),
            Some(Some(ItemState::Failed))
        );
        assert_eq!(
            item_filter("state=succeeded").ok(),
            Some(Some(ItemState::Succeeded))
        );
        for bad in ["state", "id = x", "state = DONE"] {
            let e = Status::from(item_filter(bad).expect_err(bad));
            assert_eq!(e.code(), Code::InvalidArgument);
            assert!(e.message().contains("filter"), "{}", e.message());
        }
    }

    #[test]
    fn pages_are_bounded_and_tokens_are_ours() {
        assert_eq!(page(0, "").ok(), Some((0, 100)));
        assert_eq!(page(5, "10").ok(), Some((10, 5)));
        assert!(page(1001, "").is_err());
        assert!(page(-1, "").is_err());
        assert!(page(5, "abc").is_err());
        assert!(jobs_page_token("abc").is_err());
        assert_eq!(jobs_page_token("").ok(), Some(None));
    }

    #[test]
    fn item_names_parse_into_job_and_item() {
        assert_eq!(item_name("jobs/j1/items/a-1").ok(), Some(("j1", "a-1")));
        for bad in [
            "jobs/j1",
            "jobs/J1/items/a",
            "other/j1/items/a",
            "jobs//items/a",
        ] {
            let e = Status::from(item_name(bad).expect_err(bad));
            assert_eq!(e.code(), Code::InvalidArgument, "{bad}");
            assert!(
                e.message()
                    .starts_with("invalid name: expected jobs/{job}/items/{item}"),
                "{bad}: {}",
                e.message()
            );
        }
        let e = Status::from(item_name("jobs/j1/items/").expect_err("empty item"));
        assert_eq!(e.code(), Code::InvalidArgument);
    }
}
