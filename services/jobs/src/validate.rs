//! CreateJob's input checked before anything is queued: every problem is collected (field path
//! and what to change) and answered at once as INVALID_ARGUMENT with a `BadRequest`; a job is
//! queued whole or not at all (a `manifest_uri`'s lines are read by [`crate::manifest`]).

use std::collections::HashMap;

use tonic::Status;
use tonic_types::{ErrorDetails, StatusExt as _};
use voxpool_domain::{
    contract::check_tenant, reference::is_tag, snapshot::Snapshot, untrusted::check_field,
};
use voxpool_proto::{
    jobs::v1::{CreateJobRequest, JobItemSpec, job_item_spec::Voice},
    scheduler::v1::Priority,
    synthesis::v1::AudioFormat,
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

    fn into_status(self) -> Result<(), Status> {
        let Some((field, why)) = self.kept.first() else {
            return Ok(());
        };
        let mut details = ErrorDetails::new();
        for (field, why) in &self.kept {
            details.add_bad_request_violation(field.clone(), why.clone());
        }
        let more = match (self.kept.len() - 1, self.dropped) {
            (0, _) => String::new(),
            (n, 0) => format!(" (and {n} more problems, listed in the BadRequest details)"),
            (n, d) => format!(
                " (and {} more problems; the BadRequest details list the first {MAX_VIOLATIONS})",
                n + d
            ),
        };
        Err(Status::with_error_details(
            tonic::Code::InvalidArgument,
            format!("invalid {field}: {why}{more}; nothing was queued"),
            details,
        ))
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
) -> Result<Checked, Status> {
    let field = source.field();
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
        characters += i64::try_from(chars).unwrap_or(i64::MAX);
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
    }
    p.into_status()?;
    Ok(Checked {
        items: items.into_iter().map(|i| (i.id.clone(), i)).collect(),
        characters,
        priority,
    })
}

/// ALREADY_EXISTS for a `request_id` that names job `id`, created from another request.
pub fn request_id_reused(request_id: &str, id: &str) -> Status {
    voxpool_domain::status::with_info(
        tonic::Code::AlreadyExists,
        format!(
            "request_id {} already created jobs/{id} with other items, format or sample rate: give this request a new request_id, or GetJob jobs/{id}",
            voxpool_domain::untrusted::quote(request_id)
        ),
        voxpool_domain::contract::JobsReason::RequestIdReused.as_str(),
        HashMap::from([("job".to_owned(), format!("jobs/{id}"))]),
        None,
    )
}

/// ListJobs' `page_token`: empty for the first page, else a cursor this service gave.
pub fn jobs_page_token(token: &str) -> Result<Option<crate::store::Cursor>, Status> {
    if token.is_empty() {
        return Ok(None);
    }
    crate::store::Cursor::parse(token).map(Some).ok_or_else(|| {
        voxpool_domain::status::invalid_argument(
            "page_token",
            "not a token this service gave: pass next_page_token as it came",
        )
    })
}
