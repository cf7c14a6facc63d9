//! A `manifest_uri`'s JSON Lines (`voxctl batch`'s form, without `card`) read as they stream
//! from the blob store, with the limits applied while reading: an object over
//! [`MAX_MANIFEST_BYTES`] is refused from its size before a byte is read (and reading stops
//! there should it grow), a line over [`MAX_LINE_BYTES`] is skipped without being kept, and
//! reading stops past [`MAX_ITEMS`] items. Memory stays within one line and the items kept.
//!
//! Every bad line is reported at once, as [`crate::service::validate::check`] does for the items:
//! the problems found here go with the items to it.

use bytes::BytesMut;
use futures::StreamExt as _;
use serde::Deserialize;
use tokio_util::codec::{AnyDelimiterCodec, Decoder as _};
use voxpool_proto::jobs::v1::{JobItemSpec, job_item_spec::Voice};

use crate::{
    results::{BlobError, Results},
    service::validate::{MAX_ITEMS, Problems, Source},
};

/// Longest line of a manifest, in bytes: an item's text is at most 20,000 characters, which
/// JSON-escaped take at most 240 KB; the rest of the line is small.
pub const MAX_LINE_BYTES: usize = 1024 * 1024;
/// Largest manifest, in bytes.
pub const MAX_MANIFEST_BYTES: u64 = 64 * 1024 * 1024;

/// What a manifest read gives [`crate::service::validate::check`]: its items, where each came from,
/// and the problems of the lines that could not be read.
pub type Read = (Vec<JobItemSpec>, Source, Problems);

/// Reads the manifest `uri` names from `results`' store (module doc). Errors: the store's
/// (no such object, not a path in the store, unreachable).
pub async fn read(results: &Results, uri: &str) -> Result<Read, BlobError> {
    let (size, mut body) = results.open_manifest(uri).await?;
    let mut reader = Reader::new();
    if size > MAX_MANIFEST_BYTES {
        reader.too_large(size);
        return Ok(reader.finish());
    }
    while let Some(chunk) = body.next().await {
        if !reader.feed(&chunk?) {
            break;
        }
    }
    Ok(reader.finish())
}

/// One manifest line.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Line {
    id: String,
    text: String,
    pack_id: Option<String>,
    snapshot: Option<serde_json::Value>,
    card: Option<serde_json::Value>,
    #[serde(default)]
    emotion: String,
    seed: Option<u64>,
}

/// A manifest's bytes as they arrive ([`Reader::feed`]) turned into items; then
/// [`Reader::finish`].
pub struct Reader {
    /// Splits lines, keeping at most [`MAX_LINE_BYTES`] of one (it skips the rest of a longer
    /// one up to its newline).
    codec: AnyDelimiterCodec,
    buffer: BytesMut,
    /// Bytes taken so far.
    read: u64,
    /// Lines seen so far (the 1-based number of the last).
    line: usize,
    items: Vec<JobItemSpec>,
    /// The line of each item.
    lines: Vec<usize>,
    problems: Problems,
    /// A limit stopped the reading: the rest is not read.
    stopped: bool,
}

impl Default for Reader {
    fn default() -> Self {
        Self::new()
    }
}

impl Reader {
    /// A reader at the manifest's first byte.
    pub fn new() -> Self {
        Self {
            codec: AnyDelimiterCodec::new_with_max_length(
                b"\n".to_vec(),
                Vec::new(),
                MAX_LINE_BYTES,
            ),
            buffer: BytesMut::new(),
            read: 0,
            line: 0,
            items: Vec::new(),
            lines: Vec::new(),
            problems: Problems::default(),
            stopped: false,
        }
    }

    /// The manifest is `size` bytes, over [`MAX_MANIFEST_BYTES`]: nothing more is read.
    fn too_large(&mut self, size: u64) {
        self.problems.add(
            "manifest_uri",
            format!(
                "{size} bytes: a manifest is at most {MAX_MANIFEST_BYTES} bytes (64 MiB); split it into several jobs"
            ),
        );
        self.stopped = true;
    }

    /// Takes the manifest's next bytes; `false` once a limit stopped the reading (the rest
    /// need not be read).
    pub fn feed(&mut self, chunk: &[u8]) -> bool {
        if self.stopped {
            return false;
        }
        self.read += chunk.len() as u64;
        if self.read > MAX_MANIFEST_BYTES {
            self.too_large(self.read);
            return false;
        }
        self.buffer.extend_from_slice(chunk);
        loop {
            match self.codec.decode(&mut self.buffer) {
                Ok(Some(line)) => self.take(&line),
                Ok(None) => return !self.stopped,
                Err(_) => self.too_long(),
            }
            if self.stopped {
                return false;
            }
        }
    }

    /// The items, their lines and the problems found (the last line need not end in a newline).
    pub fn finish(mut self) -> Read {
        while !self.stopped {
            match self.codec.decode_eof(&mut self.buffer) {
                Ok(Some(line)) => self.take(&line),
                Ok(None) => break,
                Err(_) => self.too_long(),
            }
        }
        (self.items, Source::Manifest(self.lines), self.problems)
    }

    /// The current line is over [`MAX_LINE_BYTES`] (the codec skips the rest of it).
    fn too_long(&mut self) {
        self.line += 1;
        self.problems.add(
            format!("manifest_uri line {}", self.line),
            format!(
                "longer than {MAX_LINE_BYTES} bytes (1 MiB): an item's text is at most {} characters; split it into several items",
                crate::service::validate::MAX_TEXT_CHARS
            ),
        );
    }

    /// One line (without its newline).
    fn take(&mut self, raw: &[u8]) {
        self.line += 1;
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        if raw.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        let field = format!("manifest_uri line {}", self.line);
        let line: Line = match serde_json::from_slice(raw) {
            Ok(line) => line,
            Err(e) => {
                self.problems
                    .add(field, format!("not a manifest item ({e})"));
                return;
            }
        };
        let voice = match (line.pack_id, line.snapshot, line.card) {
            (_, _, Some(_)) => {
                self.problems.add(field, "card paths cannot be read by the server: put the card's snapshot in the line (\"snapshot\"), or submit with voxctl job submit, which reads cards");
                return;
            }
            (Some(pack), None, None) => Some(Voice::PackId(pack)),
            (None, Some(snapshot), None) => Some(Voice::SnapshotJson(snapshot.to_string())),
            (None, None, None) => None,
            (Some(_), Some(_), None) => {
                self.problems
                    .add(field, "give only one of packId, snapshot");
                return;
            }
        };
        if self.items.len() == MAX_ITEMS {
            self.problems.add(
                "manifest_uri",
                format!("more than {MAX_ITEMS} items: split it into several jobs"),
            );
            self.stopped = true;
            return;
        }
        self.lines.push(self.line);
        self.items.push(JobItemSpec {
            id: line.id,
            text: line.text,
            voice,
            emotion: line.emotion,
            seed: line.seed,
        });
    }
}

#[cfg(test)]
mod tests {
    use voxpool_proto::jobs::v1::CreateJobRequest;

    use super::*;

    /// `manifest` fed in chunks of `chunk` bytes.
    fn read_in_chunks(manifest: &[u8], chunk: usize) -> Read {
        let mut reader = Reader::new();
        for part in manifest.chunks(chunk) {
            if !reader.feed(part) {
                break;
            }
        }
        reader.finish()
    }

    /// The (field, description) pairs `read` is refused with.
    fn violations(read: Read) -> Vec<(String, String)> {
        let (items, source, problems) = read;
        let e: tonic::Status = crate::service::validate::check(
            &CreateJobRequest::default(),
            items,
            &source,
            problems,
            &crate::egress::Policy::default(),
        )
        .expect_err("refused")
        .into();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        tonic_types::StatusExt::get_error_details(&e)
            .bad_request()
            .expect("bad request")
            .field_violations
            .iter()
            .map(|v| (v.field.clone(), v.description.clone()))
            .collect()
    }

    fn at(fields: &[(String, String)], line: usize, what: &str) -> bool {
        fields
            .iter()
            .any(|(f, d)| f == &format!("manifest_uri line {line}") && d.contains(what))
    }

    #[test]
    fn a_manifest_answers_its_unreadable_lines_and_its_bad_items_at_once() {
        let manifest = [
            r#"{"id":"a","text":"One.","packId":"vp_1"}"#,
            r#"{"id":"b","text":"Two.","packId":""}"#,
            r#"{"id":"a","text":"Three.","packId":"vp_1"}"#,
            "not json",
            r#"{"id":"c","text":"Four.","card":"cards/x.json"}"#,
            "{\"id\":\"d\",\"text\":\"\u{200b}\u{200b}\",\"packId\":\"vp_1\"}",
        ]
        .join("\n");
        for chunk in [1, 7, manifest.len()] {
            let read = read_in_chunks(manifest.as_bytes(), chunk);
            assert_eq!(read.0.len(), 4);
            let fields = violations(read);
            assert!(at(&fields, 2, "packId"), "{fields:?}");
            assert!(
                at(&fields, 3, "duplicate id (first at line 1)"),
                "{fields:?}"
            );
            assert!(at(&fields, 4, "not a manifest item"), "{fields:?}");
            assert!(at(&fields, 5, "card paths"), "{fields:?}");
            assert!(
                at(&fields, 6, "nothing to speak"),
                "zero-width spaces: {fields:?}"
            );
        }
    }

    #[test]
    fn a_line_over_the_limit_is_skipped_and_the_lines_after_it_still_read() {
        let long = format!(
            r#"{{"id":"long","text":"{}","packId":"vp_1"}}"#,
            "a".repeat(MAX_LINE_BYTES)
        );
        let manifest = [
            r#"{"id":"a","text":"One.","packId":"vp_1"}"#,
            &long,
            r#"{"id":"b","text":"Two.","packId":""}"#,
            &long,
        ]
        .join("\n");
        let mut reader = Reader::new();
        for part in manifest.as_bytes().chunks(64 * 1024) {
            assert!(reader.feed(part));
            assert!(
                reader.buffer.len() <= MAX_LINE_BYTES + 64 * 1024,
                "at most a line and a chunk kept: {}",
                reader.buffer.len()
            );
        }
        let read = reader.finish();
        assert_eq!(read.0.len(), 2, "the lines around the long ones are read");
        let fields = violations(read);
        assert!(at(&fields, 2, "longer than 1048576 bytes"), "{fields:?}");
        assert!(at(&fields, 3, "packId"), "{fields:?}");
        assert!(
            at(&fields, 4, "longer than 1048576 bytes"),
            "last line: {fields:?}"
        );
    }

    #[test]
    fn reading_stops_at_the_size_and_item_limits() {
        let mut reader = Reader::new();
        let chunk = vec![b' '; 1024 * 1024];
        let mut fed = 0u64;
        while reader.feed(&chunk) {
            fed += chunk.len() as u64;
            assert!(fed <= MAX_MANIFEST_BYTES, "read past the limit");
        }
        assert_eq!(
            fed, MAX_MANIFEST_BYTES,
            "stopped at the first chunk past it"
        );
        let fields = violations(reader.finish());
        assert!(
            fields
                .iter()
                .any(|(f, d)| f == "manifest_uri" && d.contains("at most 67108864 bytes")),
            "{fields:?}"
        );

        let line =
            |i: usize| format!("{{\"id\":\"i{i}\",\"text\":\"Item {i}.\",\"packId\":\"vp_1\"}}\n");
        let manifest: String = (0..MAX_ITEMS + 5).map(line).collect();
        let read = read_in_chunks(manifest.as_bytes(), 4096);
        assert_eq!(read.0.len(), MAX_ITEMS);
        let fields = violations(read);
        assert!(
            fields
                .iter()
                .any(|(f, d)| f == "manifest_uri" && d.contains("more than 10000 items")),
            "{fields:?}"
        );
    }

    #[test]
    fn a_million_bad_lines_keep_fifty_problems() {
        let mut reader = Reader::new();
        for _ in 0..1000 {
            assert!(reader.feed("not json\n".repeat(1000).as_bytes()));
        }
        let read = reader.finish();
        assert_eq!(read.2.kept().len(), 50);
        let (items, source, problems) = read;
        let e: tonic::Status = crate::service::validate::check(
            &CreateJobRequest::default(),
            items,
            &source,
            problems,
            &crate::egress::Policy::default(),
        )
        .expect_err("refused")
        .into();
        assert!(
            e.message()
                .contains("the BadRequest details list the first 50"),
            "{}",
            e.message()
        );
    }
}
